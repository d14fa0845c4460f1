"""aggregate stage: join scenarios to workload metrics into summary.csv, one row per scenario.

A scenario whose workload has no metrics.json is kept as a row with status `failed` and the
reason its stage recorded (logs/<stage>.error.json), or status `missing` when no stage has
run yet, so one failed case never hides the others; one the backend cannot run is `unsupported`,
with the reason from the plan; one whose output disagrees with the float64 NumPy reference is
`wrong`, with the numbers (kept, never ranked or recommended).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import deployments, model_rollup, roofline
from neuronsweep.analysis import ranking as compare
from neuronsweep.atomic import read_json, replacing
from neuronsweep.config.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.host.targets import TARGETS
from neuronsweep.store import layout
from neuronsweep.store.failures import latest_failure
from neuronsweep.store.plan_document import PlanDocument
from neuronsweep.store.records import MetricsRecord, timing
from neuronsweep.workloads import dtype_of, gemms, has_roofline, min_bytes
from neuronsweep.workloads import flops as work_flops

LEAD_COLUMNS = ["scenario_id", "suite", "workload_id", "backend", "status", "reason"]


def failure_reason(workload_dir: Path) -> tuple[str, str]:
    """(status, reason) for a workload without metrics, from the failure its stages recorded."""
    failure = latest_failure(workload_dir)
    if failure:
        return "failed", f"{failure['stage']}: {failure['reason']}"
    return "missing", "not run yet, or a stage was interrupted (no metrics.json and no failure recorded)"


def wrong_reason(values: dict) -> str:
    """The numbers of a case whose output disagrees with the float64 reference (NumPy, or a user's own function)."""
    if values.get("max_rel_error") is None:
        return "output could not be compared with the float64 reference (see metrics.json notes.correct)"
    return (
        f"output differs from the float64 reference: max relative error {values['max_rel_error']:.3g} "
        f"> tolerance {values['tolerance_rel']:.3g} (max absolute {values['max_abs_error']:.3g})"
    )


def rows(plan: PlanDocument, workloads_dir: Path) -> list[dict]:
    """One summary.csv row per scenario of the plan: its labels and metrics, or its status (unsupported, failed with the
    reason, missing) when it has none."""
    out = []
    for sc in plan["scenarios"]:
        wdir = workloads_dir / sc["workload_id"]
        row = {
            "scenario_id": sc["id"],
            "suite": sc["suite"],
            "suite_kind": sc.get("kind") or sc["suite"],  # plans before the field: the suite's name
            "workload_id": sc["workload_id"],
            "backend": plan["backend"],
            **sc["labels"],
        }
        metrics_path = wdir / "metrics.json"
        if sc["workload_id"] in plan.get("unsupported", {}):
            row.update(status="unsupported", reason=plan["unsupported"][sc["workload_id"]])
        elif latest_failure(wdir):  # its last attempt failed: an older metrics.json is stale
            row["status"], row["reason"] = failure_reason(wdir)
        elif metrics_path.is_file():
            try:
                values = MetricsRecord.read(metrics_path).values
            except UserError as exc:  # a damaged file costs its own row only
                row.update(status="failed", reason=f"extract: {exc}")
            else:
                row.update(status="ok", reason="")
                row.update({k: _cell(v) for k, v in values.items() if not isinstance(v, dict)})
                if values.get("correct") is False:  # measured, but not ranked or recommended
                    row.update(status="wrong", reason=wrong_reason(values))
        else:
            row["status"], row["reason"] = failure_reason(wdir)
        out.append(row)
    return out


# the backends whose peaks are measured on the host (neuronsweep calibrate), not a datasheet's
def _cell(value: object) -> object:
    """A metrics.json value as a summary.csv cell: a list (insights, warnings) as one line of its items (an
    insight by its rule; metrics.json has each whole), anything else as it is."""
    if not isinstance(value, list):
        return value
    return "; ".join(str(v.get("rule", v.get("activity", v))) if isinstance(v, dict) else str(v) for v in value)


HOST_BACKENDS = tuple(name for name, backend in BACKENDS.items() if not backend.neuron_device)
ROOFLINE_COLUMNS = (
    "ideal_compute_s",
    "ideal_memory_s",
    "ridge_flops_per_byte",
    "roofline_bound",
    "roofline_efficiency_pct",
)


def best_host_peaks(table: pd.DataFrame, plan: PlanDocument) -> pd.DataFrame:
    """A measured host peak is a floor, not a ceiling: per backend and dtype the FLOP/s peak becomes the
    best of the calibration and every workload of the sweep (extract already raised each row to its
    own rate), and the rows below it are placed against that peak again."""
    if "peak_flops_per_s" not in table:
        return table
    rows = table[
        (table["status"] == "ok")
        & table["backend"].isin(HOST_BACKENDS)
        & table["peak_flops_per_s"].notna()
        & table["roofline_time_s"].notna()
    ]
    dtype = rows["workload_id"].map(lambda w: plan["workloads"][w]["dtype"])
    for col in (*ROOFLINE_COLUMNS, "peak_flops_per_s"):  # convert_dtypes made a column of whole numbers Int64
        if col in table and pd.api.types.is_integer_dtype(table[col]):
            table[col] = table[col].astype("Float64")
    for _, grp in rows.groupby([rows["backend"], dtype]):
        best_i = grp["peak_flops_per_s"].astype(float).idxmax()
        best = float(grp.loc[best_i, "peak_flops_per_s"])
        for i, r in grp[grp["peak_flops_per_s"] < best].iterrows():
            new = dict(roofline.roofline(r["flops"], r["min_bytes"], best, r["peak_bytes_per_s"], r["roofline_time_s"]))
            for col in ROOFLINE_COLUMNS:
                table.loc[i, col] = new[col]
            table.loc[i, "peak_flops_per_s"] = best
            table.loc[i, "peak_source"] = (
                f"the best rate of this sweep in its dtype ({grp.loc[best_i, 'workload_id']} "
                f"at {best / 1e9:,.1f} GFLOP/s), above the host calibration"
            )
    return table


def targets_table(plan: PlanDocument) -> pd.DataFrame:
    """Every planned workload on every Neuron target: tile model and ideal times (analytic)."""
    rows = []
    for wid, spec in plan["workloads"].items():
        if not has_roofline(spec):  # a collective: no FLOPs, no roofline
            continue
        flops, nbytes = work_flops(spec), min_bytes(spec)
        for name in ("trn1", "inf2", "trn2", "trn3"):
            t = TARGETS[name]
            rows.append(
                {
                    "workload_id": wid,
                    "target": name,
                    "dtype": dtype_of(spec),
                    "flops": flops,
                    "min_bytes": nbytes,
                    **roofline.tiles(gemms(spec)),
                    **roofline.roofline(flops, nbytes, t.peak_flops(dtype_of(spec)), t.hbm_bytes_per_s, None),
                }
            )
    table = pd.DataFrame(rows)
    return table.drop(columns=["roofline_efficiency_pct"]) if len(table) else table


def gemms_inside(part: pd.DataFrame, workloads_dir: Path) -> dict[str, dict]:
    """Each measured layer's GEMM modules' seconds inside it (metrics.json's gemms_inside_s), by workload id."""
    out = {}
    layers = part["part"].notna() if "part" in part else pd.Series(False, index=part.index)  # a layer or the head
    for wid in part.loc[(part["status"] == "ok") & layers, "workload_id"]:
        path = workloads_dir / str(wid) / "metrics.json"
        if path.is_file():
            out[str(wid)] = MetricsRecord.read(path).values.get("gemms_inside_s") or {}
    return out


def write_model_views(folder: Path, suite: str, part: pd.DataFrame, plan: PlanDocument, workloads_dir: Path) -> None:
    """A model measured whole: <suite>-forward.csv (each forward's estimate and where its time goes) and
    <suite>-isolation.csv (each GEMM inside its layer beside alone)."""
    fwd = model_rollup.forward(part, plan["workloads"])
    if not len(fwd):
        return
    gap = model_rollup.isolation(part, plan["workloads"], gemms_inside(part, workloads_dir))
    views = [(f"{suite}-forward.csv", fwd), (f"{suite}-isolation.csv", gap)]
    entry = next((e for e in plan["config"]["suites"].get("model", []) if f"model-{e['name']}" == suite), None)
    if entry and entry.get("slo"):  # the deployment that meets its latency, from the graphs just rolled up
        where = f"suites.model ({entry['name']})"
        fields = json.loads(Path(entry["hf_config"]).read_text()) if entry.get("hf_config") else {}
        table = deployments.table(entry, fields, fwd, where).assign(measured_on=plan["backend"])
        views.append((f"{suite}-deployments.csv", table))
    for name, df in views:
        with replacing(folder / name) as tmp:
            df.to_csv(tmp, index=False)


def run(plan_json: Path, out: Path, targets_out: Path | None = None) -> pd.DataFrame:
    """Aggregate a run: one row per scenario, from each case's metrics.json or its failure record.

    Args:
        plan_json: the run's plan.json; metrics are read from <plan dir>/<backend>/workloads/.
        out: the summary.csv to write (suites/<suite>.csv go beside it).
        targets_out: also write the tile model and ideal times of every workload on the Trainium and
            Inferentia targets (roofline_targets.csv).

    Returns:
        The summary table as written.
    """
    plan: PlanDocument = read_json(plan_json)
    workloads_dir = layout.workloads_dir(plan_json.parent, plan["backend"])
    table = pd.DataFrame(rows(plan, workloads_dir)).convert_dtypes()  # ints stay ints beside failed rows
    cols = LEAD_COLUMNS + [c for c in table.columns if c not in LEAD_COLUMNS]
    samples = {wid: timing(workloads_dir / wid) for wid in table["workload_id"]}
    table = compare.compare(best_host_peaks(table[cols].copy(), plan), samples)
    with replacing(out) as tmp:
        table.to_csv(tmp, index=False)
    for suite, part in table.groupby("suite"):  # per-suite views of the same rows, without empty columns
        if (part["suite_kind"] == "model").all():  # a model's GEMMs: their time rolled up per forward
            write_model_views(out.parent / "suites", str(suite), part, plan, workloads_dir)
            part = model_rollup.rollup(part)
        with replacing(out.parent / "suites" / f"{suite}.csv") as tmp:
            part.dropna(axis=1, how="all").to_csv(tmp, index=False)
    if (table["suite"] == "loops").any():
        with replacing(out.parent / "suites" / "loops_comparison.csv") as tmp:
            compare.loops_table(table).to_csv(tmp, index=False)
    if targets_out:
        with replacing(targets_out) as tmp:
            targets_table(plan).to_csv(tmp, index=False)
    return table
