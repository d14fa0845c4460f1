"""Tile model and roofline: what a workload should cost on a target, to compare with what it did.

All Neuron constants live in TARGETS, each with its source (../shared/reference/neuron-toolchain.md
§7). On the cpu backend the peaks are the host's own, measured by `neuronsweep calibrate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

PE = 128  # TensorE systolic array: contraction (partition) dim and stationary free dim
MOVING_FREE = 512  # moving free size: one PSUM bank of 512 fp32


@dataclass(frozen=True)
class Target:
    name: str
    bf16_flops_per_s: float  # per NeuronCore, dense
    fp32_flops_per_s: float
    hbm_bytes_per_s: float  # per NeuronCore
    source: str

    def peak_flops(self, dtype: str) -> float:
        return self.fp32_flops_per_s if dtype == "fp32" else self.bf16_flops_per_s


_V2 = ("NeuronCore-v2: TensorE 128x128 at 2.8 GHz = 91.7504 TFLOPS bf16/fp16 per core, the value the "
       "profiler's MFU uses; fp32 about 4x slower (trainium_inferentia2_arch.rst); 410e9 B/s per core, the "
       "bandwidth the profiler's MBU implies (neuron-toolchain.md section 3)")
TARGETS = {
    "trn1": Target("trn1", 128 * 128 * 2 * 2.8e9, 128 * 128 * 2 * 2.8e9 / 4, 410e9, _V2),
    "inf2": Target("inf2", 128 * 128 * 2 * 2.8e9, 128 * 128 * 2 * 2.8e9 / 4, 410e9, _V2),
    "trn2": Target("trn2", 128 * 128 * 2 * 2.4e9, 128 * 128 * 2 * 2.4e9 / 4, 2.9e12 / 8,
                   "NeuronCore-v3: TensorE 128x128 at 2.4 GHz = 78.6 TFLOPS bf16 per core (79 in "
                   "trainium2_arch.rst, 2.4e9 in AWS's MFU harness), fp32 about 4x slower; HBM 2.9 TB/s per "
                   "chip over 8 cores (inferred per-core share)"),
}
TARGETS["trn1n"] = replace(TARGETS["trn1"], name="trn1n")  # same NeuronCore-v2, more network


def tiles(gemms: list[tuple[int, int, int]]) -> dict:
    """Tile counts of each GEMM on the 128x128 PE array with a 512 moving free size, and how much of
    the padded tiles is real work (a 129-wide dim pays for two 128 tiles)."""
    per = [(math.ceil(m / PE), math.ceil(k / PE), math.ceil(n / MOVING_FREE)) for m, k, n in gemms]
    padded = sum(tm * PE * tk * PE * tn * MOVING_FREE for tm, tk, tn in per)
    useful = sum(m * k * n for m, k, n in gemms)
    single = per[0] if len(per) == 1 else (None, None, None)
    return {"tiles_m": single[0], "tiles_k": single[1], "tiles_n": single[2],
            "tiles_total": sum(tm * tk * tn for tm, tk, tn in per),
            "tile_utilization_pct": 100.0 * useful / padded if padded else None}


def roofline(flops: float, min_bytes: float, peak_flops: float, peak_bytes_per_s: float,
             measured_s: float | None) -> dict:
    compute_s, memory_s = flops / peak_flops, min_bytes / peak_bytes_per_s
    ideal = max(compute_s, memory_s)
    return {
        "ideal_compute_s": compute_s,
        "ideal_memory_s": memory_s,
        "ridge_flops_per_byte": peak_flops / peak_bytes_per_s,
        "roofline_bound": "compute" if compute_s >= memory_s else "memory",
        "roofline_efficiency_pct": 100.0 * ideal / measured_s if measured_s else None,
    }


def raised_to_achieved(flops: float, min_bytes: float, peak_flops: float, peak_bytes_per_s: float,
                       measured_s: float, source: str) -> dict:
    """A measured (host) peak that a workload beat is not a ceiling: raise each roof the workload
    exceeded to its own achieved rate, so efficiency is at most 100%, and say so in the source."""
    achieved_f, achieved_b = flops / measured_s, min_bytes / measured_s
    raised = []
    if achieved_f > peak_flops:
        raised.append(f"FLOP/s to {achieved_f / 1e9:,.1f} G")
    if achieved_b > peak_bytes_per_s:
        raised.append(f"bytes/s to {achieved_b / 1e9:,.1f} G: its bytes fit in the CPU caches")
    peak_f, peak_b = max(peak_flops, achieved_f), max(peak_bytes_per_s, achieved_b)
    return {"peak_flops_per_s": peak_f, "peak_bytes_per_s": peak_b,
            "peak_source": f"{source}; raised to this workload's own rate ({', '.join(raised)}), which beat it",
            **roofline(flops, min_bytes, peak_f, peak_b, measured_s)}
