"""The model roll-up (suites.model): per model, phase, batch, seq and dtype,

- the GEMMs: the sum over the GEMMs each timed alone of count x measured latency, and each GEMM's share
  of it (the GEMMs' time, not the model's: attention's softmax, norms and activations are not in it);
- the model whole (`layers`, workloads/layer.py): the forward's estimate (each kind of layer's measured
  time x how many layers are of it, plus the head's), the share of it each category takes (the GEMMs'
  share measured, not assumed) and each GEMM's time inside its layer beside its time alone (the isolation
  gap: inside / alone; above 1, the GEMM runs slower in the layer than alone);
- under a parallel layout (workloads/deployment.py) every figure is one rank's, per tp: the forward adds
  each collective's count x its measured latency (`collectives_time_s`, `collectives_pct`), and the
  collectives are a category of their own beside the layers' profiled categories;
- the forward across ranks (workloads/forward.py) beside the sum of its parts: its first layers run on every
  rank at once, measured (`forward_measured_s`), against the same layers' and collectives' times alone
  (`forward_parts_s`, `forward_parts_gap_pct`), and which part the gap sits in (`forward_gap_in`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from neuronsweep.analysis.layer_categories import CATEGORIES
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import forward_of
from neuronsweep.workloads.forward import Forward

# tp: 1 where the entry has no parallel layout; layout: its id tag (tp8-ep4-dp2), "" where it has none
GROUP = ["model", "phase", "batch", "seq", "dtype", "tp", "layout"]
COLLECTIVE = "collective"  # the `part` of a collective a forward issues
FORWARD = "forward"  # the `part` of the forward run across its ranks


def _grouped(part: pd.DataFrame) -> pd.DataFrame:
    """The rows with a tp of 1 where they have none (an entry without a parallel layout)."""
    tp = pd.to_numeric(part["tp"], errors="coerce") if "tp" in part else pd.Series(float("nan"), index=part.index)
    tag = part["layout"].astype("string").fillna("") if "layout" in part else pd.Series("", index=part.index)
    return part.assign(tp=tp.fillna(1).astype(int), layout=tag)


def _gemm_rows(part: pd.DataFrame) -> pd.Series:
    """Which rows are GEMMs timed alone (the others are the model's layers and head, measured whole, and
    the collectives its forward issues)."""
    return part["part"].isna() if "part" in part else pd.Series(True, index=part.index)


def _collective_rows(part: pd.DataFrame) -> pd.Series:
    return part["part"] == COLLECTIVE if "part" in part else pd.Series(False, index=part.index)


def _forward_rows(part: pd.DataFrame) -> pd.Series:
    return part["part"] == FORWARD if "part" in part else pd.Series(False, index=part.index)


def rollup(part: pd.DataFrame) -> pd.DataFrame:
    """The suite's rows with `gemm_time_s` (count x latency_median_s), the group's `model_gemm_time_s` and
    `share_pct`; a group with a GEMM not measured (failed, unsupported) has no total (null, not partial)."""
    part = _grouped(part)
    out = part[_gemm_rows(part)].copy()
    latency = pd.to_numeric(out.get("latency_median_s"), errors="coerce")
    out["gemm_time_s"] = pd.to_numeric(out["count"], errors="coerce") * latency
    complete = out.groupby(GROUP, dropna=False)["gemm_time_s"].transform(lambda s: s.notna().all())
    total = out.groupby(GROUP, dropna=False)["gemm_time_s"].transform("sum")
    out["model_gemm_time_s"] = total.where(complete)
    out["share_pct"] = 100 * out["gemm_time_s"] / out["model_gemm_time_s"]
    return pd.concat([out, part[~_gemm_rows(part)]]).loc[part.index]


def headlines(part: pd.DataFrame) -> list[str]:
    """One line per group: where most of its GEMM time goes ("prefill b2 s16 fp32: 41 % in mlp.down_proj")."""
    table = rollup(part)
    lines = []
    for key, group in table.groupby(GROUP, dropna=False):
        model, phase, batch, seq, dtype, tp, tag = key
        seq = f"{seq}, {tag}" if tag else f"{seq}, tp {tp}" if tp > 1 else seq
        if group["model_gemm_time_s"].isna().all():
            lines.append(f"{model} {phase} at batch {batch}, seq {seq} ({dtype}): not every GEMM was measured")
            continue
        top = group.sort_values("share_pct", ascending=False).iloc[0]
        total = float(group["model_gemm_time_s"].iloc[0])
        spent = f"{total:.3g} s" if total >= 1 else f"{total * 1e3:.3g} ms"
        lines.append(
            f"{model} {phase} at batch {batch}, seq {seq} ({dtype}): {top['share_pct']:.0f} % of its GEMM time "
            f"in {top['gemm']} ({spent} of GEMMs per forward)"
        )
    return lines + expert_loads(part)


def expert_loads(part: pd.DataFrame) -> list[str]:
    """One line per MoE forward: the routing policy it assumed and the tokens its experts got (the load is
    the policy's, not measured: fake tensors carry no router output)."""
    if "expert_load" not in part:
        return []
    moe = part.dropna(subset=["expert_load"]).drop_duplicates(["model", "phase", "batch", "seq"])
    lines = []
    for r in moe.itertuples():
        load = [int(t) for t in str(r.expert_load).split("/")]
        busy = sum(t > 0 for t in load)
        lines.append(
            f"{r.model} {r.phase} at batch {r.batch}, seq {r.seq}: routing {r.routing} (assumed), {busy} of "
            f"{len(load)} experts get tokens, the busiest {load[0]}, the least busy of them {min(t for t in load if t)}"
        )
    return lines


def _measured(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == "ok"] if "status" in rows else rows


def forward(part: pd.DataFrame, specs: Mapping[str, Spec] | None = None) -> pd.DataFrame:
    """One row per forward (model, phase, batch, seq, dtype, tp) whose model was measured whole: its estimate
    from the layers' and the head's measured latency plus each collective's count x latency, the GEMMs
    alone's sum beside it, and each category's share (the layers' profiled splits weighted by how many
    layers are of each kind, the collectives' measured time their own category). A forward with a part not
    measured has no estimate, and says which; one with a noisy part (its spread past the ranking's rule)
    has its estimate and says which part is noisy. `specs` (plan.json's workloads): a forward across ranks
    stands beside the sum of its parts (measured_beside_parts)."""
    if "part" not in part or part["part"].isna().all():
        return pd.DataFrame()
    part = _grouped(part)
    gemms = rollup(part)
    out = []
    whole = part[~_gemm_rows(part)]
    for key, both in whole.groupby(GROUP, dropna=False):
        row = dict(zip(GROUP, key))
        group = both[~_forward_rows(both)]
        layers, colls = group[~_collective_rows(group)], group[_collective_rows(group)]
        weight = pd.to_numeric(layers["layers"], errors="coerce").fillna(1)
        count = pd.to_numeric(colls.get("count"), errors="coerce").fillna(1)
        latency = pd.to_numeric(group.get("latency_median_s"), errors="coerce")
        missing = group.loc[latency.isna() | (group["status"] != "ok"), "scenario_id"].tolist()
        noisy = group.loc[group.get("noisy", pd.Series(False, index=group.index)) == True, "scenario_id"]  # noqa: E712
        row["parts"] = len(layers)
        row["collectives_time_s"] = float((count * latency[colls.index]).sum()) if len(colls) else 0.0
        layer_time = float((weight * latency[layers.index]).sum())
        row["forward_time_s"] = None if missing else layer_time + row["collectives_time_s"]
        row["collectives_pct"] = (
            100 * row["collectives_time_s"] / row["forward_time_s"] if row["forward_time_s"] else None
        )
        why = [f"not measured: {', '.join(missing)}"] if missing else []
        why += [f"noisy (spread over 25 % of its median): {', '.join(noisy)}"] if len(noisy) else []
        row["forward_why"] = "; ".join(why)
        alone = gemms[(~gemms["model_gemm_time_s"].isna())]
        for col, value in zip(GROUP, key):
            alone = alone[alone[col].astype(str) == str(value)]
        row["gemms_alone_time_s"] = float(alone["model_gemm_time_s"].iloc[0]) if len(alone) else None
        if row["forward_time_s"] and row["gemms_alone_time_s"]:
            row["gemms_alone_over_forward_pct"] = 100 * row["gemms_alone_time_s"] / row["forward_time_s"]
        _categories(row, layers, weight, row["collectives_time_s"])
        measured = both[_forward_rows(both)]
        if len(measured):
            row |= measured_beside_parts(
                measured.iloc[0], layers, colls, _forward_spec(specs, measured.iloc[0]["workload_id"])
            )
        out.append(row)
    return pd.DataFrame(out)


def _forward_spec(specs: Mapping[str, Spec] | None, wid: str) -> Forward | None:
    found = (specs or {}).get(wid)
    return forward_of(found) if found else None


def _ok_latency(r: pd.Series) -> float | None:
    value = pd.to_numeric(r.get("latency_median_s"), errors="coerce")
    return float(value) if r.get("status") == "ok" and pd.notna(value) else None


def measured_beside_parts(
    measured: pd.Series, layers: pd.DataFrame, colls: pd.DataFrame, spec: Forward | None
) -> dict[str, object]:
    """The forward across ranks (`measured`, its row) beside the sum of the same parts timed alone: each layer
    it ran at its kind's latency, each collective call it made at that collective's; the gap, and whether it
    sits in the collectives (their time inside the forward, waits included, against alone) or the layers."""
    out: dict[str, Any] = {
        "forward_measured_s": _ok_latency(measured),
        "forward_measured_layers": measured.get("layers_run"),
    }
    for col in ("rank_wait_max_s", "straggler_rank", "collective_wait_pct", "collective_overlap_pct"):
        out[col] = measured.get(col)
    if spec is None or out["forward_measured_s"] is None:
        out["forward_gap_in"] = "the forward across ranks was not measured" if spec else "no spec for it in the plan"
        return out
    alone = {str(r["layer_kind"]): _ok_latency(r) for _, r in layers.iterrows() if r.get("part") == "layer"}
    compute = [alone.get(k) for k in spec.layer_kinds]
    times = {(str(r["op"]), int(r["bytes"])): _ok_latency(r) for _, r in colls.iterrows()}
    moved = [(times.get((op, nbytes)), calls) for op, nbytes, calls in spec.issued()]
    if any(t is None for t in compute) or any(t is None for t, _ in moved):
        out["forward_gap_in"] = "a part was not measured alone (a layer kind or a collective it issues)"
        return out
    compute_s = float(sum(t for t in compute if t is not None))
    colls_s = float(sum(t * n for t, n in moved if t is not None))
    out |= {"forward_parts_s": compute_s + colls_s, "forward_layers_alone_s": compute_s}
    out |= {"forward_collectives_alone_s": colls_s}
    out["forward_parts_gap_pct"] = 100 * (out["forward_measured_s"] - out["forward_parts_s"]) / out["forward_parts_s"]
    inside, wait = measured.get("forward_collectives_s"), measured.get("forward_wait_s")
    if pd.notna(inside):
        out["forward_collectives_inside_s"] = float(inside)
        in_colls = float(inside) - colls_s
        in_compute = out["forward_measured_s"] - float(inside) - compute_s
        where = "the collectives" if abs(in_colls) >= abs(in_compute) else "the layers' compute"
        waited = f", {float(wait) * 1e3:.3g} ms of it waiting for the last rank" if pd.notna(wait) else ""
        out["forward_gap_in"] = (
            f"{where}: collectives {in_colls * 1e3:+.3g} ms inside the forward against alone{waited}; "
            f"compute {in_compute * 1e3:+.3g} ms"
        ) + _threads(measured, layers)
    else:  # neuron, where no rank's profile of one forward gave its time in the collectives (inside the NEFF)
        out["forward_gap_in"] = (
            "not split: the host timed each forward whole (its collectives run inside its NEFF) and no rank's "
            "profile of one forward gave their time"
        )
    return out


def _threads(measured: pd.Series, layers: pd.DataFrame) -> str:
    """Where each rank computed on fewer threads than the layers alone (the ranks share the host's cores)."""
    alone = pd.to_numeric(layers.get("threads"), errors="coerce").max() if "threads" in layers else None
    rank = pd.to_numeric(measured.get("threads"), errors="coerce")
    if pd.isna(rank) or alone is None or pd.isna(alone) or rank >= alone:
        return ""
    return (
        f" (each rank computed on {int(rank)} thread(s), the layers alone on {int(alone)}: the ranks share "
        "this host's cores)"
    )


def _categories(row: dict, layers: pd.DataFrame, weight: pd.Series, collectives_s: float) -> None:
    """Each category's share of the forward's profiled time: the layers' splits weighted by their count,
    and the collectives the forward issues added to the collectives category (their measured time)."""
    split = layers.dropna(subset=["split_span_s"]) if "split_span_s" in layers else layers.iloc[:0]
    if len(split) != len(layers) or not len(layers):
        return
    w = weight[split.index]
    span = float((w * split["split_span_s"].astype(float)).sum()) + collectives_s
    for c in CATEGORIES:
        within = float((w * split[f"split_{c}_s"].astype(float)).sum())
        row[f"{c}_pct"] = 100 * (within + (collectives_s if c == "collectives" else 0.0)) / span
    row["profiled_over_timed"] = span / row["forward_time_s"] if row["forward_time_s"] else None


def isolation(part: pd.DataFrame, specs: dict, inside: dict) -> pd.DataFrame:
    """Each GEMM module of each measured layer and head: its seconds inside the layer (`inside`: workload id
    -> the capture's gemms_inside_s, per call of the layer) beside count x the latency of its GEMMs timed
    alone (the matmul rows of the same forward with its shapes), and their ratio, the isolation gap."""
    part = _grouped(part)
    gemm_rows = _measured(part[_gemm_rows(part)])
    latency = {
        (
            str(r["phase"]),
            str(r["batch"]),
            str(r["seq"]),
            str(r["dtype"]),
            int(r["m"]),
            int(r["k"]),
            int(r["n"]),
        ): float(r["latency_median_s"])
        for _, r in gemm_rows.iterrows()
        if pd.notna(r.get("latency_median_s"))
    }
    out = []
    for _, r in _measured(part[~_gemm_rows(part) & ~_collective_rows(part) & ~_forward_rows(part)]).iterrows():
        spec, measured = specs.get(r["workload_id"]), inside.get(r["workload_id"]) or {}
        if not spec:
            continue
        key = (str(r["phase"]), str(r["batch"]), str(r["seq"]), str(r["dtype"]))
        modules: dict[str, list] = {}
        for g in spec["gemms"]:
            modules.setdefault(g["module"], []).append(g)
        for module, found in sorted(modules.items()):
            times = [latency.get((*key, g["m"], g["k"], g["n"])) for g in found]
            alone = None if any(t is None for t in times) else sum(g["count"] * t for g, t in zip(found, times))
            within = measured.get(module)
            out.append(
                {
                    **{c: r[c] for c in GROUP},
                    "part": r["layer_kind"] if r["part"] == "layer" else "head",
                    "module": module,
                    "gemms": sum(g["count"] for g in found),
                    "inside_s": within,
                    "alone_s": alone,
                    "isolation_gap": within / alone if within is not None and alone else None,
                }
            )
    return pd.DataFrame(out)
