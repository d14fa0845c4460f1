"""A search's loop: propose, measure, record, until its budget is spent. Two shapes of it: rounds of the
strategy's proposals (grid, random, tpe: Optuna's ask and tell, replayed from trials.csv on resume) and
successive halving (every configuration screened cheaply, the best 1/eta and the default measured in full).
Both work on a driver.Search (its space, budget and record) and write each round to trials.csv when done,
so `kill -9` at any point loses at most the round in flight."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pandas as pd

from neuronsweep.search import space as search_space
from neuronsweep.search.space import Point
from neuronsweep.search.trials import PIPELINE, SCREEN, Searching, TrialResult, best, key, new_rows, objective

Say = Callable[[str], None]
Measure = Callable[[list[Point], int], list[TrialResult]]


def rounds(search: Searching, say: Say, measure: Measure) -> tuple[pd.DataFrame, dict[str, float] | None]:
    """Rounds of the strategy's proposals until the budget (trials, wall seconds, builds, device seconds) is
    spent or the space is; the trials table and Optuna's parameter importance."""
    table = search.recorded()
    study = search_space.Study(search.space)
    if not table.empty:
        study.replay(
            [[(search.params_of(r), objective(r)) for _, r in rows.iterrows()] for _, rows in table.groupby("round")]
        )
    measured, spent = search.spent(table)
    n_round = int(table["round"].max()) + 1 if not table.empty else 0
    while measured < search.max_trials:
        room = _room(search, table, n_round, spent, measured, say)
        if room <= 0:
            break
        seen = {key(search.params_of(r)) for _, r in table.iterrows()}
        asked: list = []
        new: list[dict] = []
        for _ in range(3 * search.per_round):  # a repeated proposal is told the earlier result, not run
            if len(new) >= room:
                break
            trial = study.ask()
            asked.append(trial)
            if key(trial.params) not in seen | {key(p) for p in new}:
                new.append(trial.params)
        t0 = time.monotonic()
        results = {key(p): r for p, r in zip(new, measure(new, n_round))} if new else {}
        round_s = time.monotonic() - t0
        earlier = {key(search.params_of(r)): dict(r) for _, r in table.iterrows()}
        done: list[tuple[dict, dict, bool]] = []
        for trial in asked:
            fresh = key(trial.params) in results
            got = results.pop(key(trial.params)) if fresh else _as_before(trial.params, earlier, done)
            study.tell(trial, got["objective_s"] if got["status"] == "ok" else None)
            done.append((trial.params, dict(got), fresh))
        added = pd.DataFrame(new_rows(len(table), n_round, round_s, PIPELINE, done))
        table = pd.concat([table, added], ignore_index=True)
        search.write(table)
        measured, spent = measured + len(new), spent + round_s
        if not new:  # 3 x per_round proposals, every one measured already: the sampler has converged
            say(f"search: stopped after round {n_round}: the strategy proposes only points measured already")
            break
        top = best(table)
        say(
            f"search {search.entry['name']}: round {n_round} done, {measured} of {search.max_trials} trials, "
            + (
                f"best so far {top['objective_s'] * 1e6:.1f} us at {search.params_of(top)}"
                if top is not None
                else "no correct trial yet"
            )
        )
        n_round += 1
    return table, study.importance()


def _room(search: Searching, table: pd.DataFrame, n_round: int, spent: float, measured: int, say: Say) -> int:
    """How many trials the next round may run (0: none, and why is said)."""
    last = table[table["round"] == n_round - 1]["round_s"] if not table.empty else pd.Series(dtype=float)
    estimate = float(last.iloc[0]) if len(last) else 0.0
    over = device_over(search, table, n_round)
    size = search.space.size()
    if over:
        say(over)
        return 0
    if search.wall_s is not None and spent + estimate > float(search.wall_s):
        say(
            f"search: stopped before round {n_round}: {spent:.0f} s spent, a round takes about "
            f"{estimate:.0f} s, budget {search.wall_s} s"
        )
        return 0
    if size is not None and len({key(search.params_of(r)) for _, r in table.iterrows()}) >= size:
        say(f"search: every one of the {size} points of the space is measured")
        return 0
    room = min(search.per_round, search.max_trials - measured)
    if search.max_builds is not None:
        room = min(room, (int(search.max_builds) - search.builds_spent(table)) // search.cases_per_trial())
        if room <= 0:
            say(f"search: stopped before round {n_round}: the budget of {search.max_builds} builds is spent")
    return room


def _as_before(params: Point, earlier: dict[tuple, dict], done: list[tuple[dict, dict, bool]]) -> dict:
    """A proposal measured already (in an earlier round, or earlier in this one): its result again."""
    prior = earlier.get(key(params)) or next(got for p, got, _ in done if key(p) == key(params))
    return {"status": prior["status"], "objective_s": objective(prior), "reason": "same point as an earlier trial"}


def halving(search: Searching, say: Say, measure: Measure, screen: Measure) -> pd.DataFrame:
    """Successive halving, measurement effort as the resource: budget.trials configurations screened
    (cpu: timed eagerly in one process, about their measured time each; elsewhere a short capture),
    then the best 1/eta of them and the default measured in full (the workflow: build, profile,
    correctness). Each rung is recorded when done; a resumed search skips what is."""
    table = search.recorded()
    configs = search_space.points(search.space, search.max_trials)
    rungs = [configs]
    for rung in (0, 1):
        todo = _pending(search, table, rungs[rung], rung)
        over = device_over(search, table, rung) if todo else None
        if over:
            say(over)
            break
        if todo:
            t0 = time.monotonic()
            results = (screen if rung == 0 else measure)(todo, rung)
            round_s = time.monotonic() - t0
            done = [(t, dict(got), True) for t, got in zip(todo, results)]
            effort = SCREEN if rung == 0 else PIPELINE
            table = pd.concat(
                [table, pd.DataFrame(new_rows(len(table), rung, round_s, effort, done))], ignore_index=True
            )
            search.write(table)
            say(f"search {search.entry['name']}: rung {rung} done ({len(todo)} configurations, {round_s:.0f} s)")
        if rung == 0:
            screened = table[(table["effort"] == SCREEN) & (table["status"] == "ok")].sort_values("objective_s")
            keep = max(1, math.ceil(len(configs) / search.space.eta))
            survivors = [search.params_of(r) for _, r in screened.head(keep).iterrows()]
            if search.max_builds is not None:  # the full rung builds; the default is one of them
                survivors = survivors[: max(0, int(search.max_builds) // search.cases_per_trial() - 1)]
            if search.space.default not in survivors:
                survivors.append(dict(search.space.default))  # the speed-up is over it: measured in full too
            rungs.append(survivors)
    return table


def device_over(search: Searching, table: pd.DataFrame, n_round: int) -> str | None:
    """Why no round may start: the device seconds spent, plus what the last round took, would pass
    budget.device_seconds (None: it may)."""
    if search.device_s is None or table.empty or "device_s" not in table:
        return None
    spent = float(table["device_s"].fillna(0).sum())
    last = float(table[table["round"] == table["round"].max()]["device_s"].fillna(0).sum())
    if spent + last <= float(search.device_s):
        return None
    return (
        f"search: stopped before round {n_round}: {spent:.1f} device seconds spent, a round takes about "
        f"{last:.1f}, budget {search.device_s}"
    )


def _pending(search: Searching, table: pd.DataFrame, configs: list[Point], rung: int) -> list[Point]:
    """The configurations of a rung not yet recorded at its effort."""
    done = set()
    if not table.empty:
        effort = SCREEN if rung == 0 else PIPELINE
        done = {key(search.params_of(r)) for _, r in table[table["effort"] == effort].iterrows()}
    return [c for c in configs if key(c) not in done]
