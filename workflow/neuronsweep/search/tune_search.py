"""A tune's searches at its shapes (search/tune.py, step 2): per shape, each custom candidate (a suites.custom
entry called with the shape's M x K and K x N inputs) is an ordinary driver.ParamSearch over its own space,
every trial a case of the tune's run. The searches of a chunk of shapes run together, each in a thread of its
own: a round of all of them is one call of the tune's workflow (one Snakemake call), and halving's screen of
all of them one process, not one a shape."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.errors import UserError
from neuronsweep.search.driver import ParamSearch
from neuronsweep.search.space import Point
from neuronsweep.search.trials import PIPELINE, TrialResult
from neuronsweep.search.tune_block import TuneBlock
from neuronsweep.search.tune_records import OK, SKIPPED, Candidate

Call = Callable[[list[tuple[ParamSearch, list[Point]]], int], list[list[TrialResult]]]


@dataclass(frozen=True)
class Asked:
    """One search's trials waiting to be run in the next call of their kind."""

    ticket: int  # where its answer goes
    kind: str  # "measure" or "screen"
    search: ParamSearch
    trials: list[Point]
    n_round: int


class Together:
    """Several searches' rounds gathered into one call: each search runs in a thread of its own and asks
    for its trials to be measured (or screened); when every search still running is waiting, `serve` runs
    all their trials as one call (one Snakemake call, one screen process) and hands each its results."""

    def __init__(self, size: int, measure: Call, screen: Call) -> None:
        self.cv = threading.Condition()
        self.live = size
        self.pending: list[Asked] = []
        self.answers: dict[int, list[TrialResult] | BaseException] = {}
        self.calls = {"measure": measure, "screen": screen}
        self.log: list[dict] = []  # per call run: its kind, searches, trials and wall seconds (bench/tune_cost.py)

    def call(self, kind: str, search: ParamSearch, trials: list[Point], n_round: int) -> list[TrialResult]:
        """From a search's thread: its trials' results, once the call of all waiting searches is done."""
        with self.cv:
            ticket = id(trials)
            self.pending.append(Asked(ticket, kind, search, trials, n_round))
            self.cv.notify_all()
            self.cv.wait_for(lambda: ticket in self.answers)
            got = self.answers.pop(ticket)
        if isinstance(got, BaseException):
            raise got
        return got

    def leave(self) -> None:
        """From a search's thread: it is done (or failed); the others no longer wait for it."""
        with self.cv:
            self.live -= 1
            self.cv.notify_all()

    def serve(self) -> None:
        """The main thread: run each gathered call until every search has left."""
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.live == 0 or len(self.pending) >= self.live)
                if self.live == 0 and not self.pending:
                    return
                taken, self.pending = self.pending, []
            answers: dict[int, list[TrialResult] | BaseException] = {}
            for kind, run in self.calls.items():
                mine = [a for a in taken if a.kind == kind]
                if not mine:
                    continue
                t0 = time.monotonic()
                got: Sequence[list[TrialResult] | BaseException]
                try:
                    got = run([(a.search, a.trials) for a in mine], max(a.n_round for a in mine))
                except BaseException as exc:  # noqa: BLE001 - each waiting search raises it
                    got = [exc] * len(mine)
                trials = sum(len(a.trials) for a in mine)
                self.log.append(
                    {"kind": kind, "searches": len(mine), "trials": trials, "wall_s": time.monotonic() - t0}
                )
                answers.update({a.ticket: g for a, g in zip(mine, got)})
            with self.cv:
                self.answers.update(answers)
                self.cv.notify_all()


def candidate_search(
    tune: TuneBlock, name: str, shape: pd.Series, cores: int | None = None, snakefile: str | Path | None = None
) -> ParamSearch:
    """The search of candidate `name` at one shape: the custom entry at that shape's M, K, N and dtype,
    its own search space (or its params as one), the tune's strategy and budget, run and folder."""
    base = tune.customs[name]
    m, k, n = tune.dims[name]
    entry = {key: v for key, v in base.items() if key not in ("search", "params", "grid", "dtype")}
    entry |= {"grid": {m: [int(shape["m"])], k: [int(shape["k"])], n: [int(shape["n"])]}, "dtype": [shape["dtype"]]}
    own = base.get("search") or {}
    space = own.get("space") or base.get("params") or {}
    trials = tune.trials_per_shape // len(tune.customs)
    if space:
        block = {"space": space, "strategy": tune.strategy, "budget": {"trials": trials}, "seed": tune.seed}
        block |= {"default": own["default"]} if "default" in own else {}
    else:  # nothing to search: the function at its own keyword defaults, one trial
        block = {"space": {}, "strategy": "grid", "budget": {"trials": 1}}
    return ParamSearch(
        tune.cfg,
        entry | {"search": block},
        tune.source,
        cores,
        snakefile,
        run=tune.run,
        folder=tune.folder / "shapes" / str(shape["shape"]) / f"{name}-{tune.digests[name]}",
        shape_labels={m: int(shape["m"]), k: int(shape["k"]), n: int(shape["n"]), "dtype": shape["dtype"]},
    )


def search_shapes(
    tune: TuneBlock,
    shapes: list[pd.Series],
    say: Callable[[str], None],
    measure: Call,
    screen: Call,
    cores: int | None = None,
    snakefile: str | Path | None = None,
    checked: set[str] | None = None,
) -> tuple[dict[str, dict[str, Candidate]], list[dict]]:
    """Every custom candidate's search at each of these shapes, run together (`measure` and `screen`: a call
    of several searches' trials, as one Snakemake call and one screen); per shape and candidate its best full
    trial (or why none), and the log of the calls made. `checked`: the candidates planned already (at an
    earlier chunk's shape), which this call adds to: each is planned once a tune, not once a chunk."""
    searches = {
        (str(sh["shape"]), name): candidate_search(tune, name, sh, cores, snakefile)
        for sh in shapes
        for name in tune.customs
    }
    together = Together(len(searches), measure, screen)
    # each candidate is planned once a tune (its function loads, its params are keywords: a child that imports
    # torch), at the first shape it meets; one that failed there is planned at each shape, where it loses the shape
    checked = set() if checked is None else checked
    for name in sorted(set(tune.customs) - checked):
        with contextlib.suppress(UserError):
            searches[(str(shapes[0]["shape"]), name)].preflight()
            checked.add(name)
    tables: dict[tuple[str, str], pd.DataFrame | BaseException] = {}

    def one(at: tuple, search: ParamSearch) -> None:
        try:
            if at[1] not in checked:  # this candidate at this shape: one sentence; it loses the shape
                search.preflight()
            tables[at] = search.run_rounds(
                say=say,
                measure=lambda t, r: together.call("measure", search, t, r),
                screen=lambda t, r: together.call("screen", search, t, r),
            )
        except BaseException as exc:  # noqa: BLE001 - carried to the main thread below
            tables[at] = exc
        finally:
            together.leave()

    threads = [threading.Thread(target=one, args=kv, daemon=True) for kv in searches.items()]
    for t in threads:
        t.start()
    together.serve()
    for t in threads:
        t.join()
    out: dict[str, dict[str, Candidate]] = {str(sh["shape"]): {} for sh in shapes}
    for (sid, name), got in tables.items():
        if isinstance(got, UserError):
            out[sid][name] = Candidate.failed(str(got), status=SKIPPED)
        elif isinstance(got, BaseException):
            raise got
        else:
            out[sid][name] = best_of(searches[(sid, name)], got)
    return out, together.log


def best_of(search: ParamSearch, table: pd.DataFrame) -> Candidate:
    """A candidate's best trial measured in full at its shape, as the table reads it (or why none)."""
    full = table[(table["status"] == "ok") & (table.get("effort", PIPELINE) == PIPELINE)]
    trials = len(table[table["measured"].map(verdict.flag)])
    if full.empty:
        bad = table[table["status"] != "ok"]
        why = bad.iloc[0]["reason"] if len(bad) else "no trial was measured in full"
        return Candidate.failed(str(why), trials)
    top = full.sort_values("objective_s").iloc[0]
    return Candidate(
        OK,
        params=search.params_of(top),
        median_s=float(top["objective_s"]),
        workload_id=str(top["workload_ids"]).split(";")[0],
        trials=trials,
        folder=str(search.folder),
    )
