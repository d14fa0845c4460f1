"""Bad configs are refused before any job, with one sentence naming the key and the fix, by both
`neuronsweep plan` and `snakemake -n`: the corpus in tests/bad_configs/, one file per mistake."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import BIN, DATA, private_cache, snakemake, tiny_config

from neuronsweep import backends, cli

CORPUS = Path(__file__).parent / "bad_configs"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))


def expected(name: str, tmp_path: Path) -> tuple[str, str, str]:
    """(config text, sentence of `neuronsweep plan`, sentence of `snakemake -n`) of one corpus file. Its
    first line says `# expect: <sentence>`; a second `# snakemake: <sentence>` line gives Snakemake's
    own words where Snakemake refuses the file before the workflow reads it (an empty file, a list).
    @CACHE@, @TMP@ and @DATA@ stand for a private compile cache, the test's folder and tests/data."""
    lines = (CORPUS / f"{name}.yaml").read_text().split("\n")
    assert lines[0].startswith("# expect: "), f"{name}.yaml: first line must be '# expect: <sentence>'"
    plan = lines[0].removeprefix("# expect: ")
    own = lines[1].startswith("# snakemake: ")
    smk = lines[1].removeprefix("# snakemake: ") if own else plan
    text = "\n".join(lines[2:] if own else lines[1:])
    marks = {"@CACHE@": str(private_cache(tmp_path, calibrated=False)), "@TMP@": str(tmp_path), "@DATA@": str(DATA)}
    for mark, value in marks.items():
        text, plan, smk = text.replace(mark, value), plan.replace(mark, value), smk.replace(mark, value)
    return text, plan, smk


def machine_skip(name: str) -> None:
    if name == "backend-neuron-without-tools" and backends.find_profiler():
        pytest.skip("this machine has the Neuron tools")
    if name == "backend-xla-without-torch-xla" and importlib.util.find_spec("torch_xla"):
        pytest.skip("this environment has torch-xla")


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 60


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.mark.torch  # the cpu plan probe or a torch child
@pytest.mark.parametrize("name", CASES)
def test_refused_by_plan_in_one_sentence(tmp_path, name):
    """`neuronsweep plan` (its main, in this process: a start-up per file would cost more than the test)."""
    machine_skip(name)
    text, sentence, _ = expected(name, tmp_path)
    (tmp_path / "config.yaml").write_text(text)
    seen, logger = Collect(), logging.getLogger("neuronsweep")
    logger.addHandler(seen)
    try:
        code = cli.main(["plan", "--config", str(tmp_path / "config.yaml")])
    finally:
        logger.removeHandler(seen)
    said = [r.getMessage() for r in seen.records]
    assert code == 2 and len(said) == 1 and sentence in said[0], said


# One file for each place a check lives on the way from the config file to the plan (stages/run_setup.py
# settles the run for the Snakefile and `neuronsweep plan` alike, and test_refused_by_plan_in_one_sentence
# takes every file): our YAML loader, the schema, the checks across keys, the plan, the machine and host
# settings, a user's code, the run's name.
WIRED = [
    "yaml-duplicate-capture",
    "top-level-key-typo",
    "nth-exec-beyond-num-exec",
    "collectives-sizes-reversed",
    "tiling-empty-plan",
    "matmul-12tb-of-tensors",
    "backend-neuron-without-tools",
    "xla-device-unknown",
    "slots-text",
    "lock-dev-null",
    "cache-dir-empty",
    "track-pattern-bad-regex",
    "custom-missing-file",
    "run-dot-dot",
    "search-default-outside-space",  # the searches and tunes, built before any job (search/checks.py)
]


def snakemake_sample() -> list[str]:
    """The corpus files `snakemake -n` is run on: every file Snakemake itself refuses (its own words), and
    one for each place a check lives (WIRED): each Snakemake start-up costs a second, and the Snakefile
    runs the checks `neuronsweep plan` runs, which takes every file."""
    own = [n for n in CASES if (CORPUS / f"{n}.yaml").read_text().split("\n")[1].startswith("# snakemake: ")]
    return sorted(set(WIRED) | set(own))


@pytest.mark.slow
@pytest.mark.workflow
def test_refused_by_snakemake_before_any_job(tmp_path):
    """`snakemake -n` on a file of each kind, two at a time (each is a Snakemake start-up)."""
    names = [
        n
        for n in snakemake_sample()
        if not (n == "backend-neuron-without-tools" and backends.find_profiler())
        and not (n == "backend-xla-without-torch-xla" and importlib.util.find_spec("torch_xla"))
    ]
    assert len(names) >= 17

    def one(name: str) -> str | None:
        work = tmp_path / name
        work.mkdir()
        text, _, sentence = expected(name, work)
        (work / "config.yaml").write_text(text)
        run = snakemake(work, "-n", check=False)
        if run.proc.returncode == 0 or sentence not in run.output or run.jobs or (work / "results").exists():
            return f"{name}: expected {sentence!r}, got {run.output[-600:]!r}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for p in pool.map(one, names) if p]
    assert not problems, "\n".join(problems)


@pytest.mark.workflow
def test_duplicate_yaml_keys_are_refused_not_merged(tmp_path):
    text = yaml.safe_dump(tiny_config(tmp_path)) + "suites:\n  tiling: {}\n"  # a second suites: drops the first
    (tmp_path / "config.yaml").write_text(text)
    line = text.splitlines().index("suites:") + 1
    sentence = f"key 'suites' appears twice in one mapping (lines {line} and {len(text.splitlines()) - 1}); keep one"
    plan = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")], capture_output=True, text=True
    )
    assert plan.returncode == 2 and sentence in plan.stderr, plan.stderr
    run = snakemake(tmp_path, "-n", check=False)
    assert run.proc.returncode != 0 and sentence in run.output


@pytest.mark.workflow
def test_a_sweep_where_every_case_is_unsupported_still_writes_summary_and_report(tmp_path):
    cfg = tiny_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]  # NKI needs a Neuron device: every case unsupported on cpu
    snakemake(tmp_path, config=cfg)
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert set(table["status"]) == {"unsupported"}
    assert "Not measured" in (tmp_path / "results" / "t" / "report.html").read_text()
