"""NKI kernels (neuron backend only): ours for matmul and mlp, and a user's own (suites.custom's
nki_kernel). `nki` itself is imported only when a kernel is made: it exists only on Neuron machines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuronsweep.kernels import custom_nki, nki_matmul, nki_mlp


def for_spec(spec: dict):
    """The NKI kernel module of a workload kind: its inputs(spec, rng) and workload_view(arrays, out)."""
    return {"matmul": nki_matmul, "mlp": nki_mlp, "custom": custom_nki}[spec["kind"]]


@dataclass
class Launch:
    """How one case calls its kernel: kernel(*inputs in arg_names order, **keywords)."""

    kernel: Any
    arg_names: list[str]
    keywords: dict = field(default_factory=dict)


def launch(spec: dict, decorate=None) -> Launch:
    """The case's kernel under nki.jit (or `decorate`, the legacy route's nki.benchmark: our kernels only)."""
    if spec["kind"] == "custom":
        kernel = custom_nki.make_kernel(spec)
        return Launch(kernel, custom_nki.arg_names(spec, kernel), custom_nki.keywords(spec))
    module = for_spec(spec)
    if spec["kind"] == "matmul":
        return Launch(module.make_kernel(decorate, *nki_matmul.tiles(spec)), list(module.ARG_NAMES))
    return Launch(module.make_kernel(decorate), list(module.ARG_NAMES))


# NKI 0.7 (SDK 2.33) supports Trn2 and Trn3 only (its pages: "relevant for: Trn2, Trn3")
TRN2_ONLY_FROM = (0, 7)
TRN2_AND_LATER = ("trn2", "trn3")


def unsupported(spec: dict, target: str | None = None, version: tuple | None = None) -> str | None:
    """Why the NKI kernel of this workload cannot run here, or None (an `impl: nki` spec only): a shape it
    does not tile, a grid point whose traced kernel would hold more than MAX_UNROLLED matmuls (one device
    loop body from NKI 0.6, every tile before), or a trn1/inf2 target under NKI 0.7+
    (`version`: the installed nki's, read from its metadata when not given)."""
    version = nki_matmul.nki_version() if version is None else version
    if spec["kind"] != "custom":  # a user's kernel: its own shapes and loops are its author's to bound
        why = _our_kernel_unsupported(spec, nki_matmul.device_loop(version))
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


def _our_kernel_unsupported(spec: dict, on_device: bool) -> str | None:
    module = for_spec(spec)
    why = module.supported(spec)
    if why:
        return f"the NKI {spec['kind']} kernel does not handle this shape: {why}"
    count = module.unrolled(spec, on_device)
    if count > nki_matmul.MAX_UNROLLED:
        where = "in one body of its device loop" if on_device else "over all its tiles"
        return (
            f"the NKI {spec['kind']} kernel would unroll {count} matmul instructions {where} at this shape, "
            f"over neuron-sweep's bound of {nki_matmul.MAX_UNROLLED}"
        )
    return None
