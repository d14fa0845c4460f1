"""The configuration reference, generated from the schema's descriptions, so the docs cannot drift from
what is validated: `python -m neuronsweep.config.reference > docs/config-reference.md` (a test fails
when the committed page differs)."""

from __future__ import annotations

import json
import sys

from neuronsweep.config.schema import load_schema, resolve_ref

HEADER = """# Configuration reference

Generated from the config schema (`workflow/schemas/config.schema.yaml`) by
`python -m neuronsweep.config.reference > docs/config-reference.md`; edit the schema's descriptions,
not this page. A config is checked against the schema before any job runs: a wrong type, range or
unknown key stops the run with one sentence naming the file and the key.
[Configuration](configuration.md) explains how the keys work together.

| key | allowed | default | meaning |
|---|---|---|---|
"""


def _allowed(sub: dict, root: dict) -> str:
    if "enum" in sub:
        return ", ".join("null" if v is None else str(v) for v in sub["enum"])
    if "const" in sub:
        return str(sub["const"])
    if "anyOf" in sub:
        return " or ".join(_allowed(resolve_ref(alt, root), root) for alt in sub["anyOf"] if "required" not in alt) or (
            sub.get("type", "")
        )
    kind = sub.get("type", "")
    if kind == "array":
        items = resolve_ref(sub.get("items", {}), root)
        return f"list of {_allowed(items, root)}"
    bounds = []
    if "minimum" in sub:
        bounds.append(f">= {sub['minimum']}")
    if "exclusiveMinimum" in sub:
        bounds.append(f"> {sub['exclusiveMinimum']}")
    if "maximum" in sub:
        bounds.append(f"<= {sub['maximum']}")
    if "maxLength" in sub:
        bounds.append(f"at most {sub['maxLength']} characters")
    return f"{kind} {', '.join(bounds)}".strip() if kind else ""


def _default(sub: dict) -> str:
    if "default" not in sub:
        return ""
    value = sub["default"]
    if value in ({}, ""):
        return ""
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, angle brackets as entities (`results/<run>/` is no tag)."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def rows(node: dict, root: dict, prefix: str = "") -> list[str]:
    """One table row per key, depth first, in the schema's order."""
    out = []
    for key, raw in node.get("properties", {}).items():
        sub = resolve_ref(raw, root)
        path = f"{prefix}{key}"
        cells = (_allowed(sub, root), _default(sub), sub.get("description", ""))
        out.append(f"| `{path}` | " + " | ".join(map(_cell, cells)) + " |")
        if sub.get("type") == "object" and "properties" in sub:
            out += rows(sub, root, f"{path}.")
        items = resolve_ref(sub.get("items", {}), root) if sub.get("type") == "array" else {}
        if items.get("type") == "object" and "properties" in items:
            out += rows(items, root, f"{path}[].")
    return out


def markdown() -> str:
    """docs/config-reference.md's text: every config key, its type, default and description, from the schema."""
    root = load_schema()
    return HEADER + "\n".join(rows(root, root)) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
