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
    """Per logical NeuronCore peaks. A logical core (LNC) is `lnc` physical cores: TensorE peak scales
    with it, while the profiler's MBU denominator stays one HBM stack (profile schema reference)."""
    name: str
    bf16_flops_per_core: float  # one physical NeuronCore, dense
    hbm_stack_bytes_per_s: float  # the bandwidth the profiler's MBU divides by
    default_lnc: int
    source: str
    hbm_bytes_per_core: float = 16 * 2**30  # device memory per physical NeuronCore (chip HBM / its cores)
    cores_per_chip: int = 2  # physical NeuronCores per chip (device): 2 on trn1/inf2, 8 on trn2
    chip_link_bytes_per_s: float | None = None  # NeuronLink between chips, per chip: what bounds a collective's busbw
    chip_link_source: str = ("the Neuron docs give NeuronLink-v2 no bandwidth figure (trn1-arch.rst, trainium.rst, "
                             "inferentia2.rst)")

    def logical_cores_per_chip(self, lnc: int | None = None) -> int:
        """What the runtime numbers (NEURON_RT_VISIBLE_CORES) on one chip: physical cores / LNC."""
        return max(1, self.cores_per_chip // self.lnc(lnc))

    def hbm_bytes(self, lnc: int | None = None) -> float:
        return self.hbm_bytes_per_core * self.lnc(lnc)

    def lnc(self, lnc: int | None) -> int:
        return lnc or self.default_lnc

    def bf16_flops(self, lnc: int | None = None) -> float:
        return self.bf16_flops_per_core * self.lnc(lnc)

    def peak_flops(self, dtype: str, lnc: int | None = None) -> float:
        """TensorE dense peak; fp32 runs at a quarter of the bf16/fp16 rate on NeuronCore-v2 and -v3."""
        return self.bf16_flops(lnc) / (4 if dtype == "fp32" else 1)

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_stack_bytes_per_s


_V2 = ("NeuronCore-v2: TensorE 128x128 at 2.8 GHz = 91.7504 TFLOPS bf16/fp16 per core, the value the "
       "profiler's MFU uses; fp32 4x slower (trainium_inferentia2_arch.rst); 410e9 B/s, the bandwidth the "
       "profiler's MBU divides by (real inf2 metadata hbm_ddr_bandwidth; neuron-toolchain.md section 3); LNC 1; "
       "32 GiB of HBM per chip of 2 NeuronCores")
TARGETS = {
    "trn1": Target("trn1", 128 * 128 * 2 * 2.8e9, 410e9, 1, _V2),
    "inf2": Target("inf2", 128 * 128 * 2 * 2.8e9, 410e9, 1, _V2),
    "trn2": Target("trn2", 128 * 128 * 2 * 2.4e9, 2.9e12 / 4, 2,
                   "NeuronCore-v3: TensorE 128x128 at 2.4 GHz = 78.6 TFLOPS bf16 per physical core (79 in "
                   "trainium2_arch.rst, 2.4e9 in AWS's MFU harness), times the LNC (default 2 on trn2: neuronx-cc "
                   "docs), fp32 4x slower; MBU over one HBM stack: 2.9 TB/s per chip over its 4 stacks "
                   "(trainium2.rst: 96 GiB in 4 stacks; profile schema: mbu divides by one HBM stack)",
                   hbm_bytes_per_core=96 * 2**30 / 8, cores_per_chip=8,  # 96 GiB per chip, 8 NeuronCores
                   chip_link_bytes_per_s=1024e9,
                   chip_link_source="intra-instance NeuronLink-v3 bandwidth: 1,024 GB/sec/chip (trn2-arch.rst)"),
}
TARGETS["trn1n"] = replace(TARGETS["trn1"], name="trn1n")  # same NeuronCore-v2, more network


def target_family(instance_type: str | None) -> str | None:
    """'inf2.xlarge' -> 'inf2', 'trn1n.32xlarge' -> 'trn1n'; None when unknown (a stand-in, a cpu name)."""
    family = str(instance_type or "").split(".")[0].strip().lower()
    return family if family in TARGETS else None


def metadata_peaks(meta: dict | None, lnc: int = 1) -> dict | None:
    """Peaks from the profile's own metadata (legacy json `metadata[0]`: pe_num_rows/cols, pe_clock_freq
    in GHz, num_physical_cores, hbm_ddr_bandwidth; parquet Metadata: tensor_engine_num_rows/cols,
    tensor_engine_clock_freq, num_physical_cores):
    what this very device reports, preferred over the TARGETS table. None when the fields are absent."""
    if not meta:
        return None
    rows = meta.get("pe_num_rows") or meta.get("tensor_engine_num_rows")
    cols = meta.get("pe_num_cols") or meta.get("tensor_engine_num_cols")
    clock = meta.get("pe_clock_freq") or meta.get("tensor_engine_clock_freq")
    hbm = meta.get("hbm_ddr_bandwidth")
    if not (rows and cols and clock and hbm):
        return None
    cores = meta.get("num_physical_cores") or lnc  # the physical cores behind the profiled logical core
    return {"bf16_flops_per_s": rows * cols * 2 * clock * 1e9 * cores, "hbm_bytes_per_s": float(hbm),
            "source": f"the profile's metadata: TensorE {rows}x{cols} at {clock} GHz x {cores} physical core(s), "
                      f"hbm_ddr_bandwidth {hbm:.4g} B/s"}


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
