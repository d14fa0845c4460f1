"""Bad configs are refused before any job, with one sentence naming the key and the fix, by both
`neuronsweep plan` and `snakemake -n` (the reliability issue's corpus starts here)."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest
import yaml

from conftest import BIN, snakemake, tiny_config

MATMUL = {"matmul": {"shapes": [{"m": 8, "k": 8, "n": 8}]}}

BAD = {
    "run-trailing-newline": ({"run": "r1\n"}, "key 'run' = 'r1\\n' must be a plain name of 1 to 100 letters"),
    "run-too-long": ({"run": "r" * 5000}, "key 'run' is longer than 100 characters; shorten it."),
    "bad-regex": ({"track_patterns": {"tensor": "("}},
                  "key 'track_patterns.tensor' = '(' is not a valid regex"),
    "dim-beyond-int64": ({"suites": {"matmul": {"shapes": [{"m": 10**20, "k": 1, "n": 1}]}}},
                         "key 'suites.matmul.shapes.0.m' must be at most 1048576"),
    "empty-plan": ({"suites": {"tiling": {"boundaries": [1], "multiples": [1], "offsets": [-1], "vary": ["m"]}}},
                   "nothing to run: the suites of the config expand to no scenario"),
    "cache-dir-not-a-folder": ({"cache_dir": "/dev/null/cache"},
                               "config key 'cache_dir' = '/dev/null/cache' is not a writable folder"),
    "heads-above-hidden": ({"suites": {"llm": {"models": [{"name": "m", "hidden": 8, "intermediate": 16, "heads": 16,
                                                           "kv_heads": 4}], "projections": ["qkv"]}}},
                           "hidden 8 must be a multiple of heads 16"),
}


def write(tmp_path, overrides: dict):
    cfg = tiny_config(tmp_path)
    cfg.update({"suites": MATMUL})
    cfg.update(overrides)
    return cfg


@pytest.mark.parametrize("name", sorted(BAD))
def test_refused_before_any_job_by_plan_and_snakemake(tmp_path, name):
    overrides, sentence = BAD[name]
    cfg = write(tmp_path, overrides)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    plan = subprocess.run([str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
                          capture_output=True, text=True)
    assert plan.returncode == 2 and sentence in plan.stderr and "Traceback" not in plan.stderr, plan.stderr
    run = snakemake(tmp_path, "-n", check=False)
    assert run.proc.returncode != 0 and sentence in run.output and not run.jobs, run.output[-2000:]


def test_duplicate_yaml_keys_are_refused_not_merged(tmp_path):
    text = yaml.safe_dump(tiny_config(tmp_path)) + "suites:\n  tiling: {}\n"  # a second suites: drops the first
    (tmp_path / "config.yaml").write_text(text)
    line = text.splitlines().index("suites:") + 1
    sentence = f"key 'suites' appears twice in one mapping (lines {line} and {len(text.splitlines()) - 1}); keep one"
    plan = subprocess.run([str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
                          capture_output=True, text=True)
    assert plan.returncode == 2 and sentence in plan.stderr, plan.stderr
    run = snakemake(tmp_path, "-n", check=False)
    assert run.proc.returncode != 0 and sentence in run.output


def test_a_sweep_where_every_case_is_unsupported_still_writes_summary_and_report(tmp_path):
    cfg = tiny_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]  # NKI needs a Neuron device: every case unsupported on cpu
    snakemake(tmp_path, config=cfg)
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert set(table["status"]) == {"unsupported"}
    assert "Not measured" in (tmp_path / "results" / "t" / "report.html").read_text()
