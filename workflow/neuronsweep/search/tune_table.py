"""A tune's table (search/tune.py, steps 3 and 4): per shape the fastest candidate against the compiler's
build, judged by analysis/verdict.py (timed again together in fresh processes where the backend's programs
run here, else their stored captures, by the same rule); what the table saves per forward (count x median,
and the forward projected by its measured GEMM share); and what the tune writes: dispatch.csv, gain.csv,
dispatch.json (search/dispatch.py's Table) and tune.html."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import replacing, write_json
from neuronsweep.config.backends import BACKENDS
from neuronsweep.json_numbers import finite_number
from neuronsweep.runs import interleave
from neuronsweep.search import dispatch, tune_page
from neuronsweep.search.dispatch import COMPILER
from neuronsweep.search.tune_block import TuneBlock
from neuronsweep.search.tune_records import SKIPPED, Candidate, Searched, TuneState
from neuronsweep.search.tune_shapes import GROUP, variant_at
from neuronsweep.store import layout, records

WINNER_COLUMNS = ("params", "winner_median_s", "winner_run", "winner_workload_id", "correct")
PAIR = (("run", "default_workload_id"), ("winner_run", "winner_workload_id"))  # a verdict's two cases: run, id
Judge = Callable[[pd.DataFrame], list[verdict.Verdict]]


def rows(
    tune: TuneBlock, gemms: pd.DataFrame, defaults: pd.DataFrame, variants: dict, state: TuneState, backend: str
) -> pd.DataFrame:
    """One row per shape: its default, and the fastest candidate measured where one beat it (with its output
    check, from its case on `backend`)."""
    counts = gemms.groupby("shape")["count"].sum()
    modules = gemms.groupby("shape")["gemm"].agg(lambda g: ";".join(sorted(set(g))))
    out = []
    for _, d in defaults.iterrows():
        sid = str(d["shape"])
        row = {
            "shape": sid,
            **{k: d[k] for k in ("m", "k", "n", "dtype")},
            "count": int(counts[sid]),
            "gemms": modules[sid],
            "default_median_s": finite_number(d["latency_median_s"]),
            "run": d.get("run", tune.run),
            "default_workload_id": d["workload_id"],
        }
        if d["status"] != "ok":
            out.append(row | {"winner": None, "verdict": f"default not measured ({d['status']}: {d['reason']})"})
            continue
        out.append(row | _winner(tune, sid, row, variants, state.shapes.get(sid), backend))
    table = pd.DataFrame(out)
    for col in WINNER_COLUMNS:  # dispatch.csv has them where the compiler won every shape too (empty)
        if col not in table:
            table[col] = None
    return table


def _winner(tune: TuneBlock, sid: str, row: dict, variants: dict, searched: Searched | None, backend: str) -> dict:
    """The columns a measured shape's winner fills (the compiler where no candidate beat it, with why)."""
    found = {label: variant_at(v, sid, tune.variants[label]) for label, v in variants.items()}
    if searched is None and tune.customs:
        found |= {name: Candidate.failed("not searched (budget)", status=SKIPPED) for name in tune.customs}
    found |= searched.candidates if searched else {}
    if not found:
        return {"winner": COMPILER, "verdict": ""}
    out: dict = {"trials": 1 + sum(c.trials or 0 for c in found.values())}
    out["candidates_out"] = "; ".join(f"{name}: {c.reason}" for name, c in found.items() if not c.ok)
    ok = {name: c for name, c in found.items() if c.ok and c.median_s is not None}
    top = min(ok.items(), key=lambda kv: kv[1].median_s or 0.0, default=None)
    if top is None:
        said = "not searched (budget)" if searched is None and not tune.variants else ""
        return out | {"winner": COMPILER, "verdict": said or "no candidate ran correctly here (candidates_out)"}
    name, c = top
    if (c.median_s or 0.0) >= row["default_median_s"]:
        return out | {"winner": COMPILER, "verdict": "the compiler's build was the fastest measured"}
    run = c.run or tune.run
    return out | {
        "winner": name,
        "params": json.dumps(c.params, sort_keys=True),
        "winner_median_s": c.median_s,
        "winner_run": run,
        "winner_workload_id": c.workload_id,
        **_correctness(backend, run, str(c.workload_id)),
    }


def _correctness(backend: str, run: str, wid: str) -> dict:
    """The winner's output against the float64 reference (its case's metrics.json), as the sweep checks it."""
    path = layout.workload_dir(layout.run_dir(run), backend, wid) / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"correct": None}
    return {k: metrics.get(k) for k in ("correct", "max_rel_error", "tolerance_rel")}


def judge(
    tune: TuneBlock,
    table: pd.DataFrame,
    backend: str,
    rounds: int,
    say: Callable[[str], None],
    decide: Judge | None = None,
) -> None:
    """The winners against the compiler's build, judged (by `decide` where given); kept in judged.json by
    (shape, winner's case, its code, and off the host the captures' digest) so a resumed tune does not time
    them again. Fills verdict, speedup (with its interval), tie and ships."""
    contenders = table[table["winner"].notna() & (table["winner"] != COMPILER)] if len(table) else table
    for col in ("speedup", "speedup_low", "speedup_high", "verdict", "tie", "ships"):
        if col not in table:
            table[col] = None
    table["ships"] = table["winner"].where(table["winner"].notna(), None)
    if contenders.empty:
        return
    path = tune.folder / "judged.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    here = BACKENDS[backend].retimed_here
    key = {
        i: f"{r['shape']}|{r['winner_workload_id']}|{tune.code_of(r['winner'])}{'' if here else _captures(backend, r)}"
        for i, r in contenders.iterrows()
    }
    todo = [i for i in contenders.index if key[i] not in record]
    if todo:
        chosen = table.loc[todo]
        if decide is not None:
            verdicts = decide(chosen)
        elif here:
            verdicts = verdict.judge(_timed_pairs(backend, chosen, rounds, tune.seed, say))
        else:  # the programs need the device: their stored timings, by the same rule (one process a case
            pairs = [tuple(records.timing(c) for c in _cases(backend, r)) for _, r in chosen.iterrows()]
            verdicts = verdict.judge(pairs)  # is not judged, and says why)
        for i, v in zip(todo, verdicts):
            record[key[i]] = v.as_speedup() | {"rounds": rounds if here else None}
        write_json(path, record)
    for i in contenders.index:
        got = record[key[i]]
        faster = got["said"] == verdict.FASTER
        cols = ["verdict", "speedup", "speedup_low", "speedup_high"]
        table.loc[i, cols] = [got["said"], got.get("speedup"), got.get("speedup_low"), got.get("speedup_high")]
        table.loc[i, "tie"] = not faster
        table.loc[i, "ships"] = table.loc[i, "winner"] if faster else COMPILER


def _captures(backend: str, row: pd.Series) -> str:
    """Off the host a verdict rests on the two cases' stored captures: their records' digest, so that captures
    taken again (a capture setting changed, e.g. neuron.latency_samples) are judged again."""
    h = hashlib.sha256()
    for case in _cases(backend, row):
        with contextlib.suppress(OSError):  # no capture: no timing either, which the verdict says
            h.update((case / "capture" / "capture.json").read_bytes())
    return "|" + h.hexdigest()[:8]


def _cases(backend: str, row: pd.Series) -> tuple[Path, Path]:
    """The folders of a verdict's two cases: the compiler's default build, the winner's."""
    a, b = (layout.workload_dir(layout.run_dir(str(row[run])), backend, str(row[wid])) for run, wid in PAIR)
    return a, b


def _timed_pairs(backend: str, chosen: pd.DataFrame, rounds: int, seed: int, say: Callable[[str], None]) -> list[tuple]:
    """(default, winner) Timings per shape: both programs in every fresh process, in alternation."""
    groups = []
    for _, r in chosen.iterrows():
        default, winner = _cases(backend, r)
        groups.append({f"default:{r['shape']}": default / "build", f"winner:{r['shape']}": winner / "build"})
    timed = interleave.time_together(groups, rounds, seed=seed, say=say)
    return [(timed[f"default:{s}"], timed[f"winner:{s}"]) for s in chosen["shape"]]


def gain(gemms: pd.DataFrame, table: pd.DataFrame, forward: pd.DataFrame | None) -> pd.DataFrame:
    """Per forward: the GEMMs' time with the defaults and with the table (count x median; a winner not
    judged faster saves nothing), and where the model was measured whole (`forward`: the run's
    suites/model-<name>-forward.csv) the forward projected by its measured GEMM share."""
    by_shape = table.set_index("shape")
    tuned = {
        sid: (r["winner_median_s"] if r.get("ships") not in (None, COMPILER) else r["default_median_s"])
        for sid, r in by_shape.iterrows()
    }
    out = []
    keys = [c for c in GROUP if c in gemms]  # a table of before has no tp
    for values, group in gemms.groupby(keys, sort=False):
        row = dict(zip(keys, values))
        before = [c * by_shape.loc[s, "default_median_s"] for s, c in zip(group["shape"], group["count"])]
        after = [c * tuned[s] for s, c in zip(group["shape"], group["count"])]
        if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in before + after):
            out.append(row | {"gemm_default_s": None, "why": "a GEMM of this forward was not measured"})
            continue
        row |= {"gemm_default_s": sum(before), "gemm_tuned_s": sum(after)}
        row["saving_s"] = row["gemm_default_s"] - row["gemm_tuned_s"]
        row["saving_pct"] = 100 * row["saving_s"] / row["gemm_default_s"]
        out.append(row | _projected(forward, row))
    return pd.DataFrame(out)


def _projected(forward: pd.DataFrame | None, row: dict) -> dict:
    """The forward projected with the table: its measured time less its GEMM share times the GEMMs'
    saving fraction (the assumption: the GEMMs inside the layer speed up by the share they do alone)."""
    if forward is None:
        return {"projection": "the model was not measured whole in this run (layers: true, then the sweep)"}
    match = forward
    for col in (c for c in GROUP if c in match and c in row):  # a table of before has no tp
        match = match[match[col].astype(str) == str(row[col])]
    if match.empty or pd.isna(match.iloc[0].get("forward_time_s")) or pd.isna(match.iloc[0].get("gemm_pct")):
        return {"projection": "this forward was not measured whole (or not split by category)"}
    f = match.iloc[0]
    share = float(f["gemm_pct"]) / 100
    fraction = row["saving_s"] / row["gemm_default_s"]
    return {
        "forward_s": float(f["forward_time_s"]),
        "gemm_share_pct": 100 * share,
        "forward_tuned_s": float(f["forward_time_s"]) * (1 - share * fraction),
        "projection": "forward x (1 - GEMM share x the GEMMs' saving fraction): the GEMMs inside the layers "
        "assumed to speed up as they do alone",
    }


def dispatch_table(tune: TuneBlock, table: pd.DataFrame) -> dispatch.Table:
    """The table a runtime looks a GEMM up in: per dtype and K x N, what each measured M ships (the compiler's
    GEMM, with its settings where a setting won, or a function with its params)."""
    functions = {name: e["function"] for name, e in tune.customs.items()}
    shapes: dict[str, list[dispatch.Choice]] = {}
    for _, r in table.sort_values("m").iterrows():
        ships = r.get("ships") or COMPILER
        params = json.loads(r["params"]) if ships != COMPILER and isinstance(r.get("params"), str) else {}
        settings = tune.variants.get(ships, {})
        shapes.setdefault(dispatch.Table.key(int(r["k"]), int(r["n"]), r["dtype"]), []).append(
            dispatch.Choice(
                COMPILER if settings else ships,
                functions.get(ships),
                {} if settings else params,
                int(r["m"]),
                settings,
                finite_number(r.get("speedup")) if ships != COMPILER else 1.0,
            )
        )
    return dispatch.Table(tune.entry["name"], tune.cfg["run"], shapes)


def write(tune: TuneBlock, table: pd.DataFrame, gained: pd.DataFrame) -> None:
    """dispatch.csv, gain.csv, dispatch.json and tune.html, each replaced whole."""
    with replacing(tune.folder / "dispatch.csv") as tmp:
        table.to_csv(tmp, index=False)
    with replacing(tune.folder / "gain.csv") as tmp:
        gained.to_csv(tmp, index=False)
    write_json(tune.folder / "dispatch.json", dispatch_table(tune, table).to_json())
    with replacing(tune.folder / "tune.html") as tmp:
        tmp.write_text(tune_page.render(tune.entry["name"], table, gained))
