"""A search's trials record (results/<run>/search/<name>/trials.csv): what one trial's measurement gives, the
effort it was measured with, and how a row's params, objective and the best trial are read back. One place
for both the strategies that write rows (search/strategy.py) and what reads them (the finalists, status)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol, TypedDict

import pandas as pd

from neuronsweep.search.space import Point, Space, Value

SCREEN, PIPELINE = "screen", "pipeline"  # trials.csv's effort: halving's cheap rung, or the workflow's cases


class TrialResult(TypedDict, total=False):
    """What measuring one configuration gave: a row of trials.csv less its params and round bookkeeping."""

    status: str  # ok, failed, wrong, unsupported, missing
    objective_s: float | None  # the geometric mean of its cases' median latency (ok only)
    reason: str  # why not ok: its first case's reason, with the case's id
    cases: int  # cases it ran (grid points x dtypes x impls)
    workload_ids: str  # those cases, joined by ";" (a CSV cell)
    latency_spread_s: float | None  # the largest spread of its cases' timings
    device_s: float | None  # seconds its cases held the device
    run: str  # the run its cases are in
    build_s: float | None
    cache_hits: int | None


class Best(TypedDict, total=False):
    """best.json: a search's winner, its speed-up over the default with the evidence (search/finalists.py)."""

    suite: str
    strategy: str
    seed: int
    trials: int
    failed_or_wrong: int
    default: Point
    importance: dict[str, float] | None
    winner: Point | None
    why: str  # no winner: why
    winner_objective_s: float
    winner_is_default: bool
    default_objective_s: float
    speedup_stored: float
    evidence: str  # what the verdicts rest on
    vs_default: list[dict[str, str | float | None]]  # a verdict per shape (analysis/verdict.Verdict.as_speedup, `on`)
    vs_runner_up: list[dict[str, str | float | None]]
    tie: list[Point]


class Searching(Protocol):
    """What a search's strategies (search/strategy.py) and its finalists (search/finalists.py) read and write
    of it: driver.Search, as they see it."""

    entry: dict
    space: Space
    folder: Path
    max_trials: int
    per_round: int
    max_builds: int | None
    wall_s: float | None
    device_s: float | None
    importance: dict[str, float] | None

    def recorded(self) -> pd.DataFrame: ...  # noqa: D102 - driver.Search's

    def write(self, table: pd.DataFrame) -> None: ...  # noqa: D102

    def params_of(self, row: pd.Series | dict) -> Point: ...  # noqa: D102

    def spent(self, table: pd.DataFrame) -> tuple[int, float]: ...  # noqa: D102

    def builds_spent(self, table: pd.DataFrame) -> int: ...  # noqa: D102

    def cases_per_trial(self) -> int: ...  # noqa: D102

    def run_of(self, params: Point) -> str: ...  # noqa: D102


def key(params: Point) -> tuple:
    """A configuration's identity, whatever its values' types after a CSV round trip."""
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def params_in(row: dict) -> dict:
    """A trials.csv row's params (its `param.<name>` columns) by name."""
    return {k[len("param.") :]: v for k, v in row.items() if k.startswith("param.")}


def objective(row: pd.Series | dict) -> float | None:
    """A trial's objective as its record gives it: a finite number of an ok trial, else None."""
    try:
        value = float(row.get("objective_s"))  # type: ignore[arg-type]  # a row (a Series) or a record (a dict)
    except (AttributeError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) and row.get("status") == "ok" else None


def as_listed(value: Value, values: list[Value]) -> Value:
    """A value read back from CSV as the space lists it (1.0 and "1.0", True and "True")."""
    for v in values:
        if str(v) == str(value):
            return v
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (v, value))
        if numbers and float(v) == float(value):  # 1 read back as 1.0 (a column with gaps)
            return v
    return value


def best(table: pd.DataFrame) -> pd.Series | None:
    """The best trial measured in full (halving's screened times only until one is)."""
    ok = table[table["status"] == "ok"]
    if "effort" in ok and (ok["effort"] == PIPELINE).any():
        ok = ok[ok["effort"] == PIPELINE]
    return None if ok.empty else ok.sort_values("objective_s").iloc[0]


def new_rows(start: int, n_round: int, round_s: float, effort: str, done: list[tuple[dict, dict, bool]]) -> list[dict]:
    """The rows a round adds: per (params, result, measured now) a trial numbered from `start`. The one place a
    round's trials are merged into the record, for every strategy."""
    return [
        {"trial": start + i, "round": n_round, **{f"param.{k}": v for k, v in params.items()}}
        | {"measured": measured, "round_s": round_s, "effort": effort}
        | got
        for i, (params, got, measured) in enumerate(done)
    ]
