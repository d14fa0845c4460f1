"""The docs: the MkDocs site builds with --strict (every link and nav entry resolves), the configuration
reference is the schema's, and the README stays a short start that names no internal documents."""

from __future__ import annotations

import re
import subprocess

from helpers import BIN, REPO

from neuronsweep.config import reference


def test_the_configuration_reference_is_generated_from_the_schema():
    committed = (REPO / "docs" / "config-reference.md").read_text()
    assert committed == reference.markdown(), (
        "docs/config-reference.md is stale: run `python -m neuronsweep.config.reference > docs/config-reference.md`"
    )
    for key in ("capture.nth_exec", "neuron.target", "suites.collectives.world_sizes", "suites.llm.models[].heads"):
        assert f"| `{key}` |" in committed


def test_the_docs_site_builds_strict(tmp_path):
    proc = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(BIN)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "config-reference" / "index.html").is_file()
    # every list item written renders as one: a list right after a paragraph line is a run-on
    # paragraph to MkDocs (Python-Markdown needs the blank line; GitHub does not)
    for page in sorted((REPO / "docs").glob("*.md")):
        site = tmp_path / "site" / ("" if page.stem == "index" else page.stem) / "index.html"
        article = site.read_text().split("<article", 1)[1].split("</article>", 1)[0]
        written, rendered = len(list_items(page.read_text())), article.count("<li")
        assert rendered == written, f"docs/{page.name}: {written} list items written, {rendered} rendered"


def list_items(markdown: str) -> list[str]:
    """The list items of a page, outside code blocks: lines starting with -, * or 1."""
    items, fence = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^\s*(?:[-*+]|\d+\.)\s+\S", line):
            items.append(line)
    return items


def test_the_readme_is_a_short_start_whose_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (REPO / target).is_file(), f"README links to {target}, which does not exist"


def test_no_user_facing_text_names_internal_documents():
    """Users cannot look up the project's founding documents or the folder beside the repository."""
    pages = [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "config").rglob("*.yaml"),
    ]
    pages += [REPO / "workflow" / "neuronsweep" / "config" / "config.schema.yaml"]
    pages += list((REPO / "workflow" / "neuronsweep").rglob("*.py"))
    found = [
        f"{p.relative_to(REPO)}: {m.group(0)!r}"
        for p in pages
        for m in re.finditer(r"\.\./shared|\bseed 00\d|\bseeds? \d{3}|design card", p.read_text())
    ]
    assert not found, found
