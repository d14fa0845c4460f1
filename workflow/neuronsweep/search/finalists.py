"""A search's conclusion (best.json, search.html): the fastest correct trial, and its speed-up over the
default configuration and the runner-up judged by analysis/verdict.py, never on one process's samples. On a
backend whose programs run here (cpu) the finalists are timed again together in fresh processes, every one
of them in each (runs/interleave.py); elsewhere their stored timings are judged by the same rule (rounds in
processes of their own are tested, one process a case is not judged and says so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import replacing, write_json
from neuronsweep.config.backends import BACKENDS
from neuronsweep.runs import interleave
from neuronsweep.search import page as search_page
from neuronsweep.search.trials import PIPELINE, Best, Searching, key
from neuronsweep.store import layout
from neuronsweep.store.records import Timing
from neuronsweep.store.records import timing as stored_timing


def conclude(search: Searching, table: pd.DataFrame, rounds: int, say: Callable[[str], None]) -> Best:
    """best.json: the winner, its speed-up over the default configuration with the evidence."""
    full = table["effort"] == PIPELINE if "effort" in table else True
    ok = table[(table["status"] == "ok") & table["measured"].map(verdict.flag) & full].sort_values("objective_s")
    default_rows = ok[ok.apply(lambda r: search.params_of(r) == search.space.default, axis=1)]
    out: Best = {
        "suite": search.entry["name"],
        "strategy": search.space.strategy,
        "seed": search.space.seed,
        "trials": len({key(search.params_of(r)) for _, r in table.iterrows()}),
        "failed_or_wrong": int((table["status"] != "ok").sum()),
        "default": search.space.default,
        "importance": search.importance,
    }
    if ok.empty:
        out |= {"winner": None, "why": "no trial was ok and correct"}
        write_json(search.folder / "best.json", out)
        return out
    top = ok.iloc[0]
    out |= {"winner": search.params_of(top), "winner_objective_s": float(top["objective_s"])}
    if out["winner"] == search.space.default:
        out["winner_is_default"] = True  # no speed-up to claim: the default was the fastest measured
    if not default_rows.empty:
        out["default_objective_s"] = float(default_rows.iloc[0]["objective_s"])
        out["speedup_stored"] = out["default_objective_s"] / out["winner_objective_s"]
    out |= judged(search, ok, default_rows, rounds, say)
    write_json(search.folder / "best.json", out)
    with replacing(search.folder / "search.html") as tmp:
        tmp.write_text(search_page.render(search.entry["name"], out, table))
    return out


def judged(
    search: Searching, ok: pd.DataFrame, default_rows: pd.DataFrame, rounds: int, say: Callable[[str], None]
) -> Best:
    """The winner against the default and the runner-up, with the evidence the verdicts rest on."""
    workloads = layout.any_workloads_dir(search.run_of(search.params_of(ok.iloc[0])))
    if rounds <= 0 or workloads is None:
        why = "rounds 0" if rounds <= 0 else "no trial's cases were found"
        return {"evidence": f"stored timings only ({why}): one process a case, so no interval is claimed"}
    picks = {"winner": ok.iloc[0]}
    if len(ok) > 1:
        picks["runner_up"] = ok.iloc[1]
    if not default_rows.empty and default_rows.index[0] not in ok.index[:2]:
        picks["default"] = default_rows.iloc[0]
    backend = workloads.parent.name
    cases = {
        f"{role}:{wid}": layout.workload_dir(layout.run_dir(search.run_of(search.params_of(row))), backend, wid)
        for role, row in picks.items()
        for wid in row["workload_ids"].split(";")
    }
    if BACKENDS[backend].retimed_here:
        shapes = zip(*(row["workload_ids"].split(";") for row in picks.values()))  # the finalists' case of a shape
        groups = [
            {f"{role}:{wid}": cases[f"{role}:{wid}"] / "build" for role, wid in zip(picks, wids)} for wids in shapes
        ]
        timed: dict[str, Timing | None] = dict(
            interleave.time_together(groups, rounds, seed=search.space.seed, say=say)
        )
        on = "fresh processes"
        result: Best = {
            "evidence": f"{rounds} fresh processes, each timing the finalists' programs of every shape in "
            "alternation, in a random order"
        }
    else:
        timed = {name: stored_timing(case) for name, case in cases.items()}
        on = "stored timings"
        result = {
            "evidence": f"stored timings (the {backend} backend's programs run on its device): judged where a "
            "case's rounds ran in processes of their own (capture.rounds_in_processes), else one process a "
            "case, not judged"
        }
    default_is = (
        "runner_up" if not default_rows.empty and len(ok) > 1 and default_rows.index[0] == ok.index[1] else "default"
    )
    against: tuple[tuple[str, Literal["vs_default", "vs_runner_up"]], ...] = (
        (default_is, "vs_default"),
        ("runner_up", "vs_runner_up"),
    )
    for other, label in against:
        if other in picks:
            pairs = [  # A = the other, B = the winner
                (timed[f"{other}:{o}"], timed[f"winner:{w}"])
                for w, o in zip(picks["winner"]["workload_ids"].split(";"), picks[other]["workload_ids"].split(";"))
            ]
            result[label] = [v.as_speedup() | {"on": on} for v in verdict.judge(pairs)]
    if "runner_up" in picks and not any(v["said"] == verdict.FASTER for v in result.get("vs_runner_up", [])):
        result["tie"] = [search.params_of(picks["winner"]), search.params_of(picks["runner_up"])]
    return result
