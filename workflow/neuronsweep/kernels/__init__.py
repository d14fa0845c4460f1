"""NKI kernels (neuron backend only): ours for matmul and mlp, and a user's own (suites.custom's
nki_kernel). `nki` itself is imported only when a kernel is made: it exists only on Neuron machines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from neuronsweep.kernels import custom_nki, nki_matmul, nki_mlp
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described, record

if TYPE_CHECKING:
    import numpy as np


class OnChip(Protocol):
    """A target's on-chip memory per partition (host/targets.py's Target, a layer above this one)."""

    @property
    def name(self) -> str:
        """The target's name, as the run's config spells it."""

    @property
    def sbuf_partition_bytes(self) -> int:
        """SBUF bytes per partition."""

    @property
    def psum_partition_bytes(self) -> int:
        """PSUM bytes per partition."""

    @property
    def onchip_source(self) -> str:
        """The page the two figures come from."""


def for_spec(spec: Spec) -> ModuleType:
    """The NKI kernel module of a workload kind. Its functions take the kind's typed record
    (workloads.record(spec): matmul.Gemm, mlp.GatedMlp, custom.Call), which `inputs` below hands them."""
    return {"matmul": nki_matmul, "mlp": nki_mlp, "custom": custom_nki}[described(spec).name]


def inputs(spec: Spec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The case's kernel inputs by argument name, float32 from `rng`."""
    return for_spec(spec).inputs(record(spec), rng)


@dataclass
class Launch:
    """How one case calls its kernel: kernel(*inputs in arg_names order, **keywords)."""

    kernel: Any
    arg_names: list[str]
    keywords: dict = field(default_factory=dict)


def launch(spec: Spec, decorate: Callable | None = None) -> Launch:
    """The case's kernel under nki.jit (or `decorate`, the legacy route's nki.benchmark: our kernels only)."""
    if described(spec).user_code:
        call = record(spec)
        kernel = custom_nki.make_kernel(call)
        return Launch(kernel, custom_nki.arg_names(call, kernel), custom_nki.keywords(call))
    module = for_spec(spec)
    if described(spec).nki_tiles:
        return Launch(module.make_kernel(decorate, *nki_matmul.tiles(record(spec))), list(module.ARG_NAMES))
    return Launch(module.make_kernel(decorate), list(module.ARG_NAMES))


# NKI 0.7 (SDK 2.33) supports Trn2 and Trn3 only (its pages: "relevant for: Trn2, Trn3")
TRN2_ONLY_FROM = (0, 7)
TRN2_AND_LATER = ("trn2", "trn3")


def unsupported(
    spec: Spec, target: str | None = None, version: tuple | None = None, chip: OnChip | None = None
) -> str | None:
    """Why the NKI kernel of this workload cannot run here, or None (an `impl: nki` spec only): a shape it
    does not tile, a device loop's body (NKI 0.6+) that keeps more on chip than the target's partition holds,
    a grid point whose unrolled kernel (before 0.6) would hold more than MAX_UNROLLED matmuls, or a trn1/inf2
    target under NKI 0.7+
    (`version`: the installed nki's, read from its metadata when not given; `chip`: the target's on-chip
    memory, host/targets.py's onchip(target), which a device loop's body must fit in)."""
    version = nki_matmul.nki_version() if version is None else version
    if not described(spec).user_code:  # a user's kernel: its own shapes and loops are its author's to bound
        why = _our_kernel_unsupported(spec, nki_matmul.device_loop(version), chip)
        if why:
            return why
    if target and target not in TRN2_AND_LATER and version and version >= TRN2_ONLY_FROM:
        return (
            f"NKI {'.'.join(map(str, version))} (SDK 2.33+) is documented for Trn2 and Trn3 only (the NKI FAQ: "
            f"since SDK 2.29; its pages: 'relevant for: Trn2, Trn3'), though the 2.33.1 nki.jit page still lists "
            f"trn1 and inf2 among NEURON_PLATFORM_TARGET_OVERRIDE's values, and this run's target is {target}; "
            "profile impl: compiler here, or run the NKI cases on a trn2/trn3 (doctor --field-test on a "
            "trn1/inf2 says whether it builds there)"
        )
    return None


def _our_kernel_unsupported(spec: Spec, on_device: bool, chip: OnChip | None = None) -> str | None:
    module, shape, kind = for_spec(spec), record(spec), described(spec).name
    why = module.supported(shape, on_device)
    if why:
        return f"the NKI {kind} kernel does not handle this shape: {why}"
    if on_device:  # bounded by what its body keeps on chip (on the target's `chip`, where the caller knows it)
        return None if chip is None else _body_too_big(kind, module.body_bytes(shape), chip)
    count = module.unrolled(shape)
    if count > nki_matmul.MAX_UNROLLED:
        return (
            f"the NKI {kind} kernel would unroll {count} matmul instructions over all its tiles at "
            f"this shape, over neuron-sweep's bound of {nki_matmul.MAX_UNROLLED}"
        )
    return None


def _body_too_big(kind: str, need: dict[str, int], chip: OnChip) -> str | None:
    """Why one body of the kernel's device loop cannot stay on chip (NKI 0.6+), or None: the NKI Dynamic
    Loops page keeps every live tensor of a body in SBUF/PSUM for the whole loop, so its peak must fit in a
    partition of the target's (`chip`: host/targets.py, each figure with its page)."""
    for buffer, have in (("sbuf", chip.sbuf_partition_bytes), ("psum", chip.psum_partition_bytes)):
        if need[buffer] > have:
            return (
                f"one body of the NKI {kind} kernel's device loop keeps "
                f"{need[buffer] / 1024:.0f} KiB of {buffer.upper()} live per partition, over the "
                f"{have / 1024:.0f} KiB a partition holds on {chip.name} ({chip.onchip_source}); every live tensor "
                "of the body stays on chip for the whole loop (NKI Dynamic Loops): a smaller shape or tile"
            )
    return None
