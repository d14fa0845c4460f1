"""Autotune (`neuronsweep search`, docs/autotune.md). Three kinds of search (KINDS below), built by `build`:
a suites.custom entry's params and a top-level `search:` entry's settings (`driver`: ParamSearch,
SettingsSearch over the base Search, whose strategies are in `strategy` and whose finalists are judged in
`finalists`), and a model's tune (`tune`: a search per GEMM shape and candidate, its stages in `tune_shapes`,
`tune_search` and `tune_table`; `dispatch` is its table's one type, written and read back). `calls` runs a
round as a Snakemake call (or halving's screen as one process), `trials` is the trials record, `space` the
space and the strategies as Optuna sees them, `page` and `tune_page` the pages; `checks` builds every search
of a config before any job. Above the stages and runs it drives; this module stays light (the workflow's
rules import it to find a config's searches before any of them is imported)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from neuronsweep.config.suites import ConfigDocument
from neuronsweep.errors import UserError

FINALIST_ROUNDS = 5  # processes that time the finalists again (cpu): enough for verdict's t-test


class SearchDriver(Protocol):
    """What every kind of search does for the CLI, the rules and the checks: built from its config entry
    (refusing a bad block in one sentence), run or resumed, and where it stands."""

    folder: Path

    def drive(self, say: Callable[[str], None], rounds: int) -> str:
        """Run or resume it to the end of its budget; the line naming what it wrote."""
        ...

    def status_lines(self) -> list[str]:
        """`neuronsweep search status`: where it stands."""
        ...


@dataclass(frozen=True)
class Kind:
    """A kind of search: where a config holds its entries, the class that drives one, the folder and file its
    workflow rule writes (results/<run>/<folder>/<name>/<result>), and whether that rule runs after the sweep
    (a tune projects its saving on the forward the sweep measured)."""

    entries: Callable[[ConfigDocument], list[Any]]  # its entries: suites.custom's, search's, suites.model's
    driver: str  # "module:Class", imported when one is built
    folder: str
    result: str
    after_sweep: bool = False


KINDS = {
    "custom": Kind(
        lambda cfg: [e for e in cfg["suites"].get("custom", []) if e.get("search")],
        "neuronsweep.search.driver:ParamSearch",
        "search",
        "best.json",
    ),
    "config": Kind(
        lambda cfg: [{"name": b["name"], "search": b} for b in cfg.get("search", [])],
        "neuronsweep.search.driver:SettingsSearch",
        "search",
        "best.json",
    ),
    "tune": Kind(
        lambda cfg: [e for e in cfg["suites"].get("model", []) if e.get("tune")],
        "neuronsweep.search.tune:Tune",
        "tune",
        "dispatch.json",
        after_sweep=True,
    ),
}


def searches(cfg: ConfigDocument) -> dict[str, tuple[str, dict]]:
    """Every search of a config by name: (kind, entry). "custom": a suites.custom entry with a search:
    block (its params); "config": a top-level search: entry (dotted config keys, a run per trial);
    "tune": a suites.model entry with a tune: block (search/tune.py)."""
    found: dict[str, tuple[str, dict]] = {}
    for kind, described in KINDS.items():
        for entry in described.entries(cfg):
            if entry["name"] in found:
                raise UserError(f"two searches are named {entry['name']}; rename one.")
            found[entry["name"]] = (kind, entry)
    return found


def build(
    kind: str,
    cfg: ConfigDocument,
    entry: dict,
    source: str,
    cores: int | None = None,
    snakefile: str | Path | None = None,
) -> SearchDriver:
    """The driver of one search of a validated config (a bad block is one sentence here)."""
    module, _, name = KINDS[kind].driver.partition(":")
    driver: SearchDriver = getattr(importlib.import_module(module), name)(cfg, entry, source, cores, snakefile)
    return driver
