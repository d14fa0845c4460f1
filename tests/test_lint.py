"""The workflow lints clean: `snakemake --lint` has no notes and `snakefmt --check` would change nothing
(pyproject.toml [tool.snakefmt]: the project's 120 columns). Linted on config/examples/smoke.yaml, the
integration config (tests/test_slurm.py runs it end to end, locally and through Slurm)."""

from __future__ import annotations

import subprocess

from conftest import BIN, REPO


def test_snakemake_lint_has_no_notes(tmp_path):
    proc = subprocess.run([str(BIN / "snakemake"), "--lint", "--directory", str(tmp_path), "-s", str(REPO / "Snakefile"),
                           "--configfile", str(REPO / "config/examples/smoke.yaml"),
                           "--config", f"cache_dir={tmp_path / 'cache'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Congratulations, your workflow is in a good condition" in out, out[-3000:]


def test_snakefmt_check_passes():
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
