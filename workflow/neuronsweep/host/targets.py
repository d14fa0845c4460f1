"""The Neuron targets: per-core peaks, memory, cores per chip and links of each instance family, each
number with its source (AWS's architecture pages and the profiler's own metadata). One table, read by
the roofline, the device slots, the neuron backend and the report."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


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
    chip_link_source: str = (
        "the Neuron docs give NeuronLink-v2 no bandwidth figure (trn1-arch.rst, trainium.rst, inferentia2.rst)"
    )

    hbm_source: str = ""  # where hbm_stack_bytes_per_s comes from, where it is not in `source`
    # the DMA peak of one physical NeuronCore (all its DMA engines): what the performance bounds divide bytes by
    # where a profile's metadata has no dma_ddr_bandwidth; None where no documented figure is known
    dma_bytes_per_core_per_s: float | None = None
    dma_source: str = "no documented dma_ddr_bandwidth for this NeuronCore (profile metadata or AWS's pages)"
    # why the neuron backend's torch-xla route no longer serves this target, or None where it still does
    xla_route_ended: str | None = None
    # why NxD Inference no longer serves models on this target (vLLM Neuron does), or None where it still does
    nxd_inference_ended: str | None = None
    fp32_ratio: float = 4.0  # bf16 peak / fp32 peak: 4 on NeuronCore-v2 and -v3
    nki_platform: str = "trn1"  # NEURON_PLATFORM_TARGET_OVERRIDE for standalone NKI (nki.isa.nc_version)
    lnc_choices: tuple[int, ...] = (1,)  # what neuronx-cc accepts for --logical-nc-config (NCC_EARG001)
    # on-chip memory of one physical NeuronCore, per partition (128 partitions): what an NKI device loop's
    # body must keep its live tiles in for the whole loop (NKI Dynamic Loops, "Register Allocation Implications")
    sbuf_partition_bytes: int = 192 * 1024
    psum_partition_bytes: int = 16 * 1024
    onchip_source: str = (
        "NeuronCore-v2: a 24MiB SBUF and a 2MiB PSUM of 128 partitions each, 'one SBUF partition has 192KiB of "
        "memory while one PSUM partition has 16KiB' (trainium_inferentia2_arch.rst)"
    )

    def logical_cores_per_chip(self, lnc: int | None = None) -> int:
        """What the runtime numbers (NEURON_RT_VISIBLE_CORES) on one chip: physical cores / LNC."""
        return max(1, self.cores_per_chip // self.lnc(lnc))

    def hbm_bytes(self, lnc: int | None = None) -> float:
        """HBM a logical core of `lnc` physical cores has (the target's default LNC when None)."""
        return self.hbm_bytes_per_core * self.lnc(lnc)

    def lnc(self, lnc: int | None) -> int:
        """`lnc`, or the target's default."""
        return lnc or self.default_lnc

    def bf16_flops(self, lnc: int | None = None) -> float:
        """TensorE's dense bf16 peak of a logical core of `lnc` physical cores."""
        return self.bf16_flops_per_core * self.lnc(lnc)

    def peak_flops(self, dtype: str, lnc: int | None = None) -> float:
        """TensorE dense peak; fp32 at the chip's fp32 rate (a quarter of bf16 on NeuronCore-v2 and -v3)."""
        return self.bf16_flops(lnc) / (self.fp32_ratio if dtype == "fp32" else 1)

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth of a stack, the roofline's memory side."""
        return self.hbm_stack_bytes_per_s

    @property
    def peak_source(self) -> str:
        """Every peak's source: TensorE and memory, each from the page it was read from."""
        return f"{self.source}; {self.hbm_source}" if self.hbm_source else self.source


_V2 = (
    "NeuronCore-v2: TensorE 128x128 at 2.8 GHz = 91.7504 TFLOPS bf16/fp16 per core, the value the "
    "profiler's MFU uses; fp32 4x slower (trainium_inferentia2_arch.rst); 410e9 B/s, the bandwidth the "
    "profiler's MBU divides by (the hbm_ddr_bandwidth of real inf2 profile metadata); LNC 1; "
    "32 GiB of HBM per chip of 2 NeuronCores"
)
_NXDI_ENDED = (
    "Neuron SDK 2.34 ended NxD Inference there (announce-no-support-nxdi-nxd-core-inference-trn); trn2 and trn3 "
    "serve with vLLM Neuron"
)

TARGETS = {
    "trn1": Target("trn1", 128 * 128 * 2 * 2.8e9, 410e9, 1, _V2),
    "inf2": Target(
        "inf2",
        128 * 128 * 2 * 2.8e9,
        410e9,
        1,
        _V2,
        nki_platform="inf2",
        dma_bytes_per_core_per_s=435e9,
        dma_source="dma_ddr_bandwidth 435e9 B/s of one NeuronCore, from the metadata of real inf2 profiles "
        "(profiler 2.27)",
    ),
    "trn2": Target(
        "trn2",
        128 * 128 * 2 * 2.4e9,
        2.9e12 / 4,
        2,
        "NeuronCore-v3: TensorE 128x128 at 2.4 GHz = 78.6 TFLOPS bf16 per physical core (79 in "
        "trainium2_arch.rst, 2.4e9 in AWS's MFU harness), times the LNC (default 2 on trn2: neuronx-cc "
        "docs), fp32 4x slower; MBU over one HBM stack: 2.9 TB/s per chip over its 4 stacks "
        "(trainium2.rst: 96 GiB in 4 stacks; profile schema: mbu divides by one HBM stack)",
        hbm_bytes_per_core=96 * 2**30 / 8,
        cores_per_chip=8,  # 96 GiB per chip, 8 NeuronCores
        chip_link_bytes_per_s=1024e9,
        chip_link_source="intra-instance NeuronLink-v3 bandwidth: 1,024 GB/sec/chip (trn2-arch.rst)",
        nki_platform="trn2",
        lnc_choices=(1, 2),
        xla_route_ended="Neuron SDK 2.34 ended PyTorch/XLA inference on trn2 and trn3 (its announcement "
        "announce-no-support-torch-xla-inference-trn): their models build and run with TorchNeuron",
        nxd_inference_ended=_NXDI_ENDED,
        dma_bytes_per_core_per_s=435e9,
        dma_source="dma_ddr_bandwidth 435 GB/s of one NeuronCore, AWS's worked trn2 example "
        "(neuron-agentic-development, neuron-nki-profile-querying/references/example-bounds-analysis.md)",
        sbuf_partition_bytes=224 * 1024,
        onchip_source="NeuronCore-v3: 'SBUF capacity is 28MiB (or, 128 partitions of 224KiB)', 'PSUM capacity "
        "remains the same at 2MiB' (trainium2_arch.rst): 16 KiB a partition",
    ),
    "trn3": Target(
        "trn3",
        671e12 / 8,
        4.7e12 / 4,
        2,
        "NeuronCore-v4: 671 BF16/FP16/TF32 dense TFLOPS per chip of 8 cores = 83.9 TFLOPS per physical core, "
        "183 FP32 TFLOPS per chip (trainium3.rst), times the LNC (neuronx-cc defaults to LNC 2 on Trn2 and "
        "later: NCC_EVRF066); no profile of a trn3 checked these",
        hbm_bytes_per_core=144 * 2**30 / 8,
        cores_per_chip=8,
        chip_link_bytes_per_s=2.56e12,
        chip_link_source="NeuronLink-v4: 2.56 TB/sec per device (trainium3.rst)",
        hbm_source="MBU over one HBM stack: 4.7 TB/s per chip over its 4 stacks (NKI guide trainium3_arch.rst, "
        "modified 2026-03-09, the newer page; trainium3.rst, modified 2025-12-02, says 4.9 TB/s)",
        fp32_ratio=671 / 183,
        nki_platform="trn3",
        xla_route_ended="Neuron SDK 2.34 ended PyTorch/XLA inference on trn2 and trn3 (its announcement "
        "announce-no-support-torch-xla-inference-trn): their models build and run with TorchNeuron",
        nxd_inference_ended=_NXDI_ENDED,
        lnc_choices=(1, 2),
        sbuf_partition_bytes=32 * 2**20 // 128,
        onchip_source="NeuronCore-v4: 'SBUF capacity is 32 MiB (up from 28 MiB in NeuronCore-v3), while the PSUM "
        "capacity remains the same at 2 MiB' (trainium3_arch.rst): 256 KiB and 16 KiB a partition of 128",
    ),
}
TARGETS["trn1n"] = replace(TARGETS["trn1"], name="trn1n")  # same NeuronCore-v2, more network


@dataclass(frozen=True)
class Instance:
    """An instance size: its chips (Neuron devices) of its family's target, as AWS's architecture pages list them."""

    name: str
    family: str
    chips: int
    source: str

    def cores(self, lnc: int | None = None) -> int:
        """Its logical NeuronCores at `lnc` (the target's default when None)."""
        target = TARGETS[self.family]
        return self.chips * target.cores_per_chip // target.lnc(lnc)


INSTANCES = {
    i.name: i
    for i in (
        Instance("trn2.48xlarge", "trn2", 16, "trn2-arch.rst: 16 Trainium2 chips"),
        Instance("trn2u.48xlarge", "trn2", 16, "trn2-arch.rst: 16 Trainium2 chips"),
        Instance("trn1.2xlarge", "trn1", 1, "trn1-arch.rst: 1 Trainium device"),
        Instance("trn1.32xlarge", "trn1", 16, "trn1-arch.rst: 16 Trainium devices"),
        Instance("trn1n.32xlarge", "trn1", 16, "trn1-arch.rst: 16 Trainium devices"),
        Instance("inf2.xlarge", "inf2", 1, "inf2-arch.rst: 1 Inferentia2 chip"),
        Instance("inf2.8xlarge", "inf2", 1, "inf2-arch.rst: 1 Inferentia2 chip"),
        Instance("inf2.24xlarge", "inf2", 6, "inf2-arch.rst: 6 Inferentia2 chips"),
        Instance("inf2.48xlarge", "inf2", 12, "inf2-arch.rst: 12 Inferentia2 chips"),
    )
}
# NEURON_PLATFORM_TARGET_OVERRIDE accepts trn1|inf2|gen2, trn2|gen3, trn3|gen4 (nki.isa.nc_version): trn1n is trn1


def onchip(target: str | None) -> Target:
    """The target whose on-chip memory bounds an NKI device loop's body: the run's, or where it is not known
    the one with the smallest SBUF partition (NeuronCore-v2's), so a body that fits there fits everywhere."""
    return TARGETS.get(target or "") or min(TARGETS.values(), key=lambda t: t.sbuf_partition_bytes)


def same_chip(a: str, b: str) -> bool:
    """trn1 and trn1n are one chip (the n is the network); every other family names its own target."""
    return a == b or {a, b} <= {"trn1", "trn1n"}


# EC2 instance type names: family, generation, optional capability letters, then the size after the dot
# (EC2 "Instance type naming conventions": trn1n = trn1 + network, trn2u = the Trn2 UltraServer's, ...).
# The chip is the family and generation; the letters change the network or packaging, not the NeuronCore.
INSTANCE = re.compile(r"^(?P<chip>(?:trn|inf)\d+)(?P<options>[a-z-]*)$")


def instance_chip(instance_type: str | None) -> str | None:
    """'trn2n.48xlarge' -> 'trn2', 'trn3pds.48xlarge' -> 'trn3', 'inf1.xlarge' -> 'inf1' (a Neuron family we
    may have no target for); None for a name that is no Trainium or Inferentia instance."""
    m = INSTANCE.match(str(instance_type or "").split(".")[0].strip().lower())
    return m.group("chip") if m else None


def target_family(instance_type: str | None) -> str | None:
    """The target of an instance type: 'inf2.xlarge' -> 'inf2', 'trn2n.48xlarge' -> 'trn2', 'trn1n.32xlarge'
    -> 'trn1n' (its own row, one chip with trn1); None when the chip has no target here (inf1, a stand-in's
    or a cpu's name)."""
    family = str(instance_type or "").split(".")[0].strip().lower()
    if family in TARGETS:
        return family
    chip = instance_chip(instance_type)
    return chip if chip in TARGETS else None
