"""How a search's rounds run: one Snakemake call of the workflow each (its own run's cases, built and cached
like any), with the Snakefile given or found; one driver per search at a time (an OS lock)."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import yaml

from neuronsweep.config.suites import ConfigDocument
from neuronsweep.errors import UserError
from neuronsweep.store import layout


def workflow_snakefile(given: str | Path | None = None) -> Path:
    """The Snakefile a search's rounds run: the one given (the workflow's rules pass their own), else
    ./Snakefile where the search is run from a workflow's folder, else the checkout's beside this package
    (pip install -e .); one sentence when there is none."""
    checkout = Path(__file__).resolve().parents[3] / "Snakefile"
    found = Path(given) if given else Path("Snakefile") if Path("Snakefile").is_file() else checkout
    if not found.is_file():
        raise UserError(
            f"a search runs the workflow's Snakefile, and there is none at {found}: pass --snakefile, or run it "
            "from the workflow's folder (a checkout of neuron-sweep)."
        )
    return found.resolve()


def snakemake_round(
    cfg: ConfigDocument, rounds: Path, name: str, cores: int, snakefile: Path
) -> tuple[pd.DataFrame, Path]:
    """One Snakemake call on `cfg` (rounds/<name>.yaml and .log) with `snakefile`: its run's summary.csv."""
    rounds.mkdir(parents=True, exist_ok=True)
    config_file = rounds / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = config_file.with_suffix(".log")
    argv = [_snakemake(), "-s", str(snakefile), "--cores", str(cores), "--configfile", str(config_file)]
    # --nolock: the round's outputs are this search's own run, and only_driver already keeps a second driver
    # of it out; Snakemake's lock would only outlive a killed driver and refuse the resumed one
    with log.open("w") as out:
        subprocess.run([*argv, "--keep-going", "--rerun-incomplete", "--nolock"], stdout=out, stderr=subprocess.STDOUT)
    summary = layout.summary_csv(cfg["run"])
    if not summary.is_file():  # up to date is fine: a round killed after its summary is found done
        tail = log.read_text().strip().splitlines()[-3:]
        raise UserError(f"{name} wrote no summary.csv ({' / '.join(tail)}); the whole log: {log}.")
    return pd.read_csv(summary), log


@contextlib.contextmanager
def only_driver(path: Path) -> Iterator[None]:
    """One driver per search at a time (an OS lock: released by the kernel when a driver is killed)."""
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{path.parent}: another `neuronsweep search run` of this search is running; wait for it."
            ) from None
        yield


def _snakemake() -> str:
    here = Path(sys.executable).parent / "snakemake"
    return str(here) if here.is_file() else "snakemake"
