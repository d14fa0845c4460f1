"""The model roll-up (suites.model): per model, phase, batch, seq and dtype, the sum over its GEMMs of
count x measured latency, and each GEMM's share of it. It is the GEMMs' time, not the model's latency:
attention's softmax, the norms, the activations and any communication are not in it."""

from __future__ import annotations

import pandas as pd

GROUP = ["model", "phase", "batch", "seq", "dtype"]


def rollup(part: pd.DataFrame) -> pd.DataFrame:
    """The suite's rows with `gemm_time_s` (count x latency_median_s), the group's `model_gemm_time_s` and
    `share_pct`; a group with a GEMM not measured (failed, unsupported) has no total (null, not partial)."""
    out = part.copy()
    latency = pd.to_numeric(out.get("latency_median_s"), errors="coerce")
    out["gemm_time_s"] = pd.to_numeric(out["count"], errors="coerce") * latency
    complete = out.groupby(GROUP, dropna=False)["gemm_time_s"].transform(lambda s: s.notna().all())
    total = out.groupby(GROUP, dropna=False)["gemm_time_s"].transform("sum")
    out["model_gemm_time_s"] = total.where(complete)
    out["share_pct"] = 100 * out["gemm_time_s"] / out["model_gemm_time_s"]
    return out


def headlines(part: pd.DataFrame) -> list[str]:
    """One line per group: where most of its GEMM time goes ("prefill b2 s16 fp32: 41 % in mlp.down_proj")."""
    table = rollup(part)
    lines = []
    for key, group in table.groupby(GROUP, dropna=False):
        model, phase, batch, seq, dtype = key
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
