"""Tile model and roofline: what a workload should cost on a target, to compare with what it did.

The Neuron peaks live in host/targets.py `TARGETS`, each with its source; on the cpu backend the peaks
are the host's own, measured by `neuronsweep calibrate`.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

PE = 128  # TensorE systolic array: contraction (partition) dim and stationary free dim
MOVING_FREE = 512  # moving free size: one PSUM bank of 512 fp32


def _positive(value: Any) -> float | int | None:
    """A metadata value as a number above 0 (ints stay ints; numbers written as text are read); None
    for anything else (text, lists, NaN, 0, negatives), so a damaged file never gives a peak."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or number <= 0:
        return None
    return int(number) if number.is_integer() and not isinstance(value, float) else number


def metadata_peaks(meta: dict | None, lnc: int = 1) -> dict | None:
    """Peaks from the profile's own metadata (legacy json `metadata[0]`: pe_num_rows/cols, pe_clock_freq
    in GHz, num_physical_cores, hbm_ddr_bandwidth, dma_ddr_bandwidth; parquet Metadata: tensor_engine_num_rows/cols,
    tensor_engine_clock_freq, num_physical_cores): what this very device reports, preferred over the TARGETS
    table. Both compute and DMA are the logical core's: one physical core's figure (the schema reference defines
    TensorE's array and dma_ddr_bandwidth per physical NeuronCore) times the physical cores behind it, so the
    two sides of the bounds ladder are of the same cores. None when the TensorE or HBM fields are absent."""
    if not meta:
        return None
    rows = _positive(meta.get("pe_num_rows") or meta.get("tensor_engine_num_rows"))
    cols = _positive(meta.get("pe_num_cols") or meta.get("tensor_engine_num_cols"))
    clock = _positive(meta.get("pe_clock_freq") or meta.get("tensor_engine_clock_freq"))
    hbm = _positive(meta.get("hbm_ddr_bandwidth"))
    if not (rows and cols and clock and hbm):  # absent, or no number a device reports: the TARGETS table
        return None
    cores = int(_positive(meta.get("num_physical_cores")) or lnc)  # the physical cores behind the logical core
    dma = _positive(meta.get("dma_ddr_bandwidth"))
    return {
        "bf16_flops_per_s": rows * cols * 2 * clock * 1e9 * cores,
        "hbm_bytes_per_s": float(hbm),
        "lnc": cores,
        "dma_bytes_per_s": float(dma) * cores if dma else None,
        "dma_source": f"the profile's metadata dma_ddr_bandwidth {dma:.4g} B/s x {cores} physical core(s)"
        if dma
        else "",
        "source": f"the profile's metadata: TensorE {rows}x{cols} at {clock} GHz x {cores} physical core(s), "
        f"hbm_ddr_bandwidth {hbm:.4g} B/s",
    }


class Tiles(TypedDict):
    """A workload's GEMMs on the PE array (metrics.json's tile fields)."""

    tiles_m: int | None  # one GEMM's tile counts per dim (None for several)
    tiles_k: int | None
    tiles_n: int | None
    tiles_total: int | None  # every GEMM's tiles (None: no GEMM known)
    tile_utilization_pct: float | None


class RooflinePlace(TypedDict):
    """Where a workload sits under its peaks (metrics.json's roofline fields)."""

    ideal_compute_s: float
    ideal_memory_s: float
    ridge_flops_per_byte: float
    roofline_bound: str  # compute or memory
    roofline_efficiency_pct: float | None


class RaisedPlace(RooflinePlace):
    """A roofline under host peaks raised to what the workload achieved, with the peaks it used."""

    peak_flops_per_s: float
    peak_bytes_per_s: float
    peak_source: str


def tiles(gemms: list[tuple[int, int, int]]) -> Tiles:
    """Tile counts of each GEMM on the 128x128 PE array with a 512 moving free size, and how much of
    the padded tiles is real work (a 129-wide dim pays for two 128 tiles)."""
    per = [(math.ceil(m / PE), math.ceil(k / PE), math.ceil(n / MOVING_FREE)) for m, k, n in gemms]
    padded = sum(tm * PE * tk * PE * tn * MOVING_FREE for tm, tk, tn in per)
    useful = sum(m * k * n for m, k, n in gemms)
    single = per[0] if len(per) == 1 else (None, None, None)
    return {
        "tiles_m": single[0],
        "tiles_k": single[1],
        "tiles_n": single[2],
        "tiles_total": sum(tm * tk * tn for tm, tk, tn in per) if per else None,  # no GEMM known: unknown, not 0
        "tile_utilization_pct": 100.0 * useful / padded if padded else None,
    }


def roofline(
    flops: float, min_bytes: float, peak_flops: float, peak_bytes_per_s: float, measured_s: float | None
) -> RooflinePlace:
    """Where a workload of `flops` and `min_bytes` sits under the peaks: each roof's ideal time, the ridge, the bound,
    and (given a measured time) the efficiency, 100 % at the roof."""
    compute_s, memory_s = flops / peak_flops, min_bytes / peak_bytes_per_s
    ideal = max(compute_s, memory_s)
    return {
        "ideal_compute_s": compute_s,
        "ideal_memory_s": memory_s,
        "ridge_flops_per_byte": peak_flops / peak_bytes_per_s,
        "roofline_bound": "compute" if compute_s >= memory_s else "memory",
        "roofline_efficiency_pct": 100.0 * ideal / measured_s if measured_s else None,
    }


def raised_to_achieved(
    flops: float, min_bytes: float, peak_flops: float, peak_bytes_per_s: float, measured_s: float, source: str
) -> RaisedPlace:
    """A measured (host) peak that a workload beat is not a ceiling: raise each roof the workload
    exceeded to its own achieved rate, so efficiency is at most 100%, and say so in the source."""
    achieved_f, achieved_b = flops / measured_s, min_bytes / measured_s
    raised = []
    if achieved_f > peak_flops:
        raised.append(f"FLOP/s to {achieved_f / 1e9:,.1f} G")
    if achieved_b > peak_bytes_per_s:
        raised.append(f"bytes/s to {achieved_b / 1e9:,.1f} G: its bytes fit in the CPU caches")
    peak_f, peak_b = max(peak_flops, achieved_f), max(peak_bytes_per_s, achieved_b)
    return {
        "peak_flops_per_s": peak_f,
        "peak_bytes_per_s": peak_b,
        "peak_source": f"{source}; raised to this workload's own rate ({', '.join(raised)}), which beat it",
        **roofline(flops, min_bytes, peak_f, peak_b, measured_s),
    }
