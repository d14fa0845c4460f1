"""A tune's shapes (search/tune.py, step 1): the model's GEMMs as the model suite plans them (layers off),
every unique (M, K, N, dtype) with how often each forward runs it; each shape's compiler build as measured in
one Snakemake call (its default, or under a tune.settings combination: a candidate at every shape); and the
order the shapes are searched in, the most model time first."""

from __future__ import annotations

import copy
import math
from typing import cast

import pandas as pd

from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.suites import ConfigDocument, ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.json_numbers import finite_number
from neuronsweep.search.driver import set_setting, settings_digest
from neuronsweep.search.space import Point
from neuronsweep.search.tune_records import OK, Candidate
from neuronsweep.stages.run_setup import settle_run

GROUP = ["phase", "batch", "seq", "dtype", "tp"]  # one forward (tp: 1 without a parallel layout)


def shape_id(m: int, k: int, n: int, dtype: str) -> str:
    """A shape's name in the tune's folders and tables."""
    return f"m{m}-k{k}-n{n}-{dtype}"


def compiler_config(cfg: ConfigDocument, entry: ModelEntry, run: str, settings: Point | None = None) -> ConfigDocument:
    """The model's GEMMs alone as a sweep (layers off): each shape's compiler build, in the tune's run
    (the default), or with `settings` in a run named by their hash."""
    model = {k: v for k, v in entry.items() if k != "tune"} | {"layers": False}
    out = cast(ConfigDocument, copy.deepcopy({k: v for k, v in cfg.items() if k != "search"}))
    for key, value in (settings or {}).items():
        set_setting(out, key, value)
    named = f"{run}-{settings_digest(settings)}" if settings else run
    return cast(ConfigDocument, {**out, "run": named, "suites": {"model": [model]}})  # the model's GEMMs alone


def plan_gemms(config: ConfigDocument, where: str) -> tuple[pd.DataFrame, str]:
    """Every GEMM of every forward (phase, batch, seq, dtype) of a compiler_config: its module, m, k, n, count
    and workload id, as the model suite plans them (`unsupported` holds why this backend cannot run one);
    and the backend the plan settled on."""
    setup = settle_run(RunConfig.of(schema.validate(config, source=where)))
    rows = [
        {
            **{k: sc.labels.get(k, 1) for k in ("gemm", "m", "k", "n", "count", *GROUP)},
            "workload_id": sc.workload_id,
            "unsupported": setup.plan.unsupported.get(sc.workload_id, ""),
        }
        for sc in setup.plan.scenarios
        if "gemm" in sc.labels  # not the collectives a parallel layout issues
    ]
    if not rows:
        raise UserError(f"{where}: the model runs no GEMM this plan found; nothing to tune.")
    out = pd.DataFrame(rows)
    out["shape"] = [shape_id(r.m, r.k, r.n, r.dtype) for r in out.itertuples()]
    return out, setup.backend


def measured(gemms: pd.DataFrame, summary: pd.DataFrame, run: str) -> pd.DataFrame:
    """Per shape its compiler build as a run's summary.csv has it: status, reason, median latency."""
    by_wid = summary.drop_duplicates("workload_id").set_index("workload_id")
    rows = []
    for shape, group in gemms.groupby("shape", sort=False):
        first = group.iloc[0]
        got = by_wid.loc[first["workload_id"]] if first["workload_id"] in by_wid.index else None
        status = "missing" if got is None else str(got["status"])
        rows.append(
            {
                "shape": shape,
                **{k: first[k] for k in ("m", "k", "n", "dtype", "workload_id")},
                "run": run,
                "status": status,
                "reason": first["unsupported"] or ("" if got is None else text(got.get("reason"))),
                "latency_median_s": finite_number(got["latency_median_s"])
                if got is not None and status == "ok"
                else None,
            }
        )
    return pd.DataFrame(rows)


def order(gemms: pd.DataFrame, defaults: pd.DataFrame) -> pd.DataFrame:
    """The measured shapes, the most model time first (count over every forward x default latency)."""
    counts = gemms.groupby("shape")["count"].sum()
    out = defaults[defaults["status"] == "ok"].copy()
    out["count"] = out["shape"].map(counts)
    out["weight_s"] = out["count"] * out["latency_median_s"]
    return out.sort_values("weight_s", ascending=False, kind="stable")


def variant_at(measured: pd.DataFrame, sid: str, settings: Point) -> Candidate:
    """A setting's compiler build at one shape, as a candidate's best trial (or why it has none)."""
    row = measured[measured["shape"] == sid]
    if row.empty:
        return Candidate.failed("not measured", 0)
    got = row.iloc[0]
    if got["status"] != "ok" or finite_number(got["latency_median_s"]) is None:
        return Candidate.failed(f"{got['status']}: {text(got.get('reason'))}", 1)
    return Candidate(
        OK,
        params=settings,
        median_s=float(got["latency_median_s"]),
        workload_id=str(got["workload_id"]),
        run=str(got["run"]),
        trials=1,
    )


def text(value: object) -> str:
    """A summary cell as text ("" for a missing one)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
