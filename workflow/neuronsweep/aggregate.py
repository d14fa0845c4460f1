"""aggregate stage: join scenarios to workload metrics into summary.csv, one row per scenario.

A scenario whose workload has no metrics.json is kept as a row with status `failed` and the
reason its stage logged (the `neuronsweep: error:` line), or status `missing` when no stage has
run yet, so one failed case never hides the others; one the backend cannot run is `unsupported`,
with the reason from the plan.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .analysis import compare
from .atomic import read_json, replacing
from .errors import ERROR_PREFIX

STAGES = ("build", "capture", "view", "extract")
LEAD_COLUMNS = ["scenario_id", "suite", "workload_id", "backend", "status", "reason"]


def failure_reason(workload_dir: Path) -> tuple[str, str]:
    """(status, reason) for a workload without metrics, from its stage logs."""
    for stage in STAGES:
        log = workload_dir / "logs" / f"{stage}.log"
        if not log.is_file():
            continue
        errors = [line[len(ERROR_PREFIX):].strip() for line in log.read_text(errors="replace").splitlines()
                  if line.startswith(ERROR_PREFIX)]
        if errors:
            return "failed", f"{stage}: {errors[-1]}"
    return "missing", "not run yet (no metrics.json and no stage error logged)"


def rows(plan: dict, workloads_dir: Path) -> list[dict]:
    out = []
    for sc in plan["scenarios"]:
        wdir = workloads_dir / sc["workload_id"]
        row = {"scenario_id": sc["id"], "suite": sc["suite"], "workload_id": sc["workload_id"],
               "backend": plan["backend"], **sc["labels"]}
        metrics_path = wdir / "metrics.json"
        if sc["workload_id"] in plan.get("unsupported", {}):
            row.update(status="unsupported", reason=plan["unsupported"][sc["workload_id"]])
        elif metrics_path.is_file():
            metrics = read_json(metrics_path)
            row.update(status="ok", reason="")
            row.update({k: v for k, v in metrics.items() if not isinstance(v, (dict, list))})
        else:
            row["status"], row["reason"] = failure_reason(wdir)
        out.append(row)
    return out


def targets_table(plan: dict) -> pd.DataFrame:
    """Every planned workload on every Neuron target: tile model and ideal times (analytic)."""
    from .analysis import roofline
    from .workloads import DTYPE_BYTES, kind_of

    rows = []
    for wid, spec in plan["workloads"].items():
        kind = kind_of(spec)
        flops, nbytes = kind.flops(spec), kind.min_bytes(spec, DTYPE_BYTES[spec["dtype"]])
        for name in ("trn1", "inf2", "trn2"):
            t = roofline.TARGETS[name]
            rows.append({"workload_id": wid, "target": name, "dtype": spec["dtype"], "flops": flops,
                         "min_bytes": nbytes, **roofline.tiles(kind.gemms(spec)),
                         **roofline.roofline(flops, nbytes, t.peak_flops(spec["dtype"]), t.hbm_bytes_per_s, None)})
    table = pd.DataFrame(rows)
    return table.drop(columns=["roofline_efficiency_pct"]) if len(table) else table


def run(plan_json: Path, out: Path, targets_out: Path | None = None) -> pd.DataFrame:
    """Aggregate the run described by plan.json; metrics are read from <plan dir>/<backend>/workloads/."""
    plan = read_json(plan_json)
    workloads_dir = plan_json.parent / plan["backend"] / "workloads"
    table = pd.DataFrame(rows(plan, workloads_dir)).convert_dtypes()  # ints stay ints beside failed rows
    cols = LEAD_COLUMNS + [c for c in table.columns if c not in LEAD_COLUMNS]
    table = compare.compare(table[cols])
    with replacing(out) as tmp:
        table.to_csv(tmp, index=False)
    for suite, part in table.groupby("suite"):  # per-suite views of the same rows, without empty columns
        with replacing(out.parent / "suites" / f"{suite}.csv") as tmp:
            part.dropna(axis=1, how="all").to_csv(tmp, index=False)
    if (table["suite"] == "loops").any():
        with replacing(out.parent / "suites" / "loops_comparison.csv") as tmp:
            compare.loops_table(table).to_csv(tmp, index=False)
    if targets_out:
        with replacing(targets_out) as tmp:
            targets_table(plan).to_csv(tmp, index=False)
    return table
