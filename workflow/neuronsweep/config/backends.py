"""What each backend is and can do, asked by every layer instead of its name.

A question about a backend ("can its programs be timed again here?", "does its profile have device
memory?") is a field or method of its `Backend` below, answered once per backend. The rest of the package
asks `BACKENDS[name]`; only this module and the backend's own modules (backends/) compare a backend's
name. It lives in the config layer, below analysis/, workloads/ and host/, which ask it too, and imports
no backend module (nor torch). A new backend is one module in backends/ and one entry here
(docs/architecture.md, "Adding a backend"; tests/test_backend_door.py holds the rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neuronsweep.config.schema import section_defaults
from neuronsweep.config.settings import ViewSettings
from neuronsweep.config.suites import ConfigDocument

NAMES = ("cpu", "neuron", "xla")
COLLECTIVE_PLAN = "collective.json"
NO_LINK = "no link bandwidth is known for this platform"


@dataclass(frozen=True)
class Backend:
    """What the workflow, extract, the report and the runs know of a backend, without importing it (or
    torch): the files its stages write, the config keys each stage takes (Snakemake params, so a changed
    key reruns that stage), what it can measure, where its programs run, and how the report shows it."""

    name: str
    artifacts: dict[str, str]  # stage -> the file it must write ("build", "capture")
    stage_options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # why its profile has no Neuron engine, DMA or HBM counters; None: it has them
    device_counters_missing: str | None = None
    # the metrics key its device time is, and what that time means
    device_time: tuple[str, str] = ("profile_active_time_s", "profiled op-busy time (under torch.profiler)")
    call_steps: tuple[str, ...] = ()  # the Python-side steps of one call, as named in its trace
    call_steps_note: str = ""  # what a reader of those steps' shares needs to know
    compiles_collectives: bool = False  # a collective is a compiled program (neuron), not library calls (gloo)
    # it runs on a NeuronCore: its profile has device memory, the NeuronCore's peaks and a link per rank, NKI
    # kernels run, a build and a capture hold a device slot, and its figures are the instance's, not host-only
    neuron_device: bool = False
    # its built programs run on this host's CPU, so compare, a tune's verdicts and a search's finalists time
    # them again here in fresh processes; else their stored timings are judged
    retimed_here: bool = False
    # the plan probes this host (a GEMM per dtype: dtypes without a fast path, the run-time estimate)
    probes_host: bool = False
    # why a recompile trap (a workload whose Python values vary per call) cannot run on it; None: it can
    varies_unsupported: str | None = None
    # why the collectives suite cannot run on it; None: it can
    collectives_unsupported: str | None = None
    # why a model's forward across its ranks (workloads/forward.py) cannot run on it; None: it can
    ranked_forward_unsupported: str | None = (
        "the forward across ranks runs its ranks as tp gloo processes (cpu) or under torchrun with a NeuronCore "
        "per rank (neuron); this backend runs neither"
    )
    # why a collective's busbw has no link bandwidth to stand against; None: the link per rank is read
    collective_link_missing: str | None = NO_LINK
    # what its profile's active share is a share of, where a low share means overhead; None: no such share
    active_share_of: str | None = None
    # it runs through the PJRT device its section's pjrt_device names (host peaks only where that is CPU)
    pjrt: bool = False
    # what its profiled time carries beyond the framework time, said under the figure that sets them side by side
    profiled_time_note: str | None = None
    view_reads_build: bool = False  # its view reads the build's artifact (xla: the HLO module names the ops)
    capture_retries: int = 0  # a capture attempt may fail for want of device memory another process held
    # where a layer case's split by category comes from: "capture" (its capture records it) or "profile" (extract
    # reads it from the profile), and why a layer has none where that source gave none
    layer_split: str = "capture"
    layer_split_missing: str = "the capture recorded no split of this layer"
    # why a layer's categories have no window bounds (the ladder over each category's window) on it
    window_bounds_missing: str = "only a Neuron profile's tables (DmaPacket, ActiveTime, Instruction) bound a window"
    # the framework its stages run workloads with in their own process, which the warm server imports once
    preload: tuple[str, ...] = ()

    def build_artifact(self, ranks: bool) -> str:
        """The file its build writes for a workload (`ranks`: one run by several ranks, workloads.described):
        a collective's launch plan where nothing is compiled for it, else the backend's artifact."""
        return COLLECTIVE_PLAN if ranks and not self.compiles_collectives else self.artifacts["build"]

    def view_outputs(self, section: dict) -> list[str]:
        """The files its view writes beside summary.json and view.json, for its config section."""
        if self.neuron_device:
            view = ViewSettings.from_section(section)
            return [f for f, on in (("trace.pftrace", view.pftrace), ("profile.json", view.json)) if on]
        return ["trace.pftrace"] + (["parquet/Instruction.parquet"] if self.view_reads_build else [])

    def host_peaks(self, section: dict) -> bool:
        """Whether its roofline rests on the host calibration (it runs on the host CPU)."""
        if self.neuron_device:
            return False
        return not self.pjrt or section_defaults(self.name, section)["pjrt_device"] == "CPU"

    def platform(self, config: ConfigDocument) -> str:
        """Where its figures were measured, as the report's headings name it."""
        if self.neuron_device:
            sections: Mapping[str, Any] = config  # the backend's section, by its name
            return f"{self.name} {sections.get(self.name, {}).get('target', '')}".strip()
        return f"this host ({self.name} backend)"

    def host_only(self) -> str:
        """The caveat a recommendation from its figures carries ("" where they are the instance's own)."""
        if self.neuron_device:
            return ""
        return f" (host-only: measured against this host's peaks on the {self.name} backend, not a Trainium prediction)"


BACKENDS = {
    "cpu": Backend(
        "cpu",
        {"build": "model.pt2", "capture": "trace.json"},
        device_counters_missing="the cpu backend has no Neuron engines, DMA queues or HBM counters to read",
        retimed_here=True,
        probes_host=True,
        varies_unsupported="the cpu backend runs one torch.export graph, which freezes Python values at export "
        "time; recompile traps need a lazy-tensor backend (xla or neuron)",
        ranked_forward_unsupported=None,
        collective_link_missing="gloo ranks on one host exchange over loopback and shared memory: no link's "
        "bandwidth bounds busbw",
        profiled_time_note="cpu: the profiled time includes torch.profiler's own cost per op, so it sits above the "
        "framework time",
        preload=("torch", "torch.export", "torch.export._trace", "torch._export.serde.serialize", "torch.profiler"),
    ),
    "neuron": Backend(
        "neuron",
        {"build": "model.neff", "capture": "profile.ntff"},
        stage_options={
            "build": (
                "route",
                "target",
                "optlevel",
                "auto_cast",
                "lnc",
                "disable_dge",
                "extra_cc_flags",
                "xla_debug",
                "memory_tracker",
            ),
            "capture": ("profiler", "enable_dge_notifs", "memory_tracker", "latency_samples"),
            "view": ("profiler", "parquet", "json", "pftrace", "perfetto_flows", "memory_tracker"),
        },
        device_time=("profile_total_time_s", "device total_time"),
        compiles_collectives=True,
        ranked_forward_unsupported=None,  # on the TorchNeuron route (its build refuses the torch-xla route's)
        neuron_device=True,
        collective_link_missing=None,
        active_share_of="total_time",
        capture_retries=1,
        layer_split="profile",
        layer_split_missing="the profile has no FrameworkInstruction table, which Neuron Explorer's parquet output "
        "has for a NEFF compiled with XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 (a layer case's build sets them on every "
        "route)",
    ),
    "xla": Backend(
        "xla",
        {"build": "module.hlo.txt", "capture": "trace.json"},
        stage_options={"build": ("pjrt_device", "xla_debug")},  # its capture reads them from build.json
        device_counters_missing="the xla backend runs through a PJRT device without Neuron engines, DMA queues or "
        "HBM counters",
        device_time=("execute_median_s", "XLA ExecuteTime median (torch_xla metrics)"),
        call_steps=("lazy tracing (forward)", "mark_step", "wait_device_ops"),
        call_steps_note="XLA compiles inside mark_step",
        collectives_unsupported="torch-xla 2.9 on PJRT CPU (CPU_NUM_DEVICES=2, xmp.spawn) stops at the first "
        "all-reduce: its rendezvous times out with 1 of 2 participants (tried here); run the suite on cpu (gloo)",
        active_share_of="XLA execute; the rest is tracing, compiling and dispatch",
        pjrt=True,
        view_reads_build=True,
    ),
}
