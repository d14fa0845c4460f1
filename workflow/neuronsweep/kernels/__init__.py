"""NKI kernels (neuron backend only). `nki` itself is imported only when a kernel is made: it exists
only on Neuron machines."""

from neuronsweep.kernels import nki_matmul, nki_mlp


def for_spec(spec: dict):
    """The NKI kernel module of a workload kind: ARG_NAMES, make_kernel, supported, inputs, reference."""
    return {"matmul": nki_matmul, "mlp": nki_mlp}[spec["kind"]]


# NKI 0.7 (SDK 2.33) supports Trn2 and Trn3 only (its pages: "relevant for: Trn2, Trn3")
TRN2_ONLY_FROM = (0, 7)
TRN2_AND_LATER = ("trn2", "trn3")


def unsupported(spec: dict, target: str | None = None, version: tuple | None = None) -> str | None:
    """Why the NKI kernel of this workload cannot run here, or None (an `impl: nki` spec only): a shape it
    does not tile, a grid point that would unroll past MAX_UNROLLED, or a trn1/inf2 target under NKI 0.7+
    (`version`: the installed nki's, read from its metadata when not given)."""
    if spec["kind"] == "custom":
        return (
            "building a suites.custom nki_kernel is not implemented yet (only impl: compiler runs your "
            "function); its NKI case is listed, not measured"
        )
    module = for_spec(spec)
    why = module.supported(spec)
    if why:
        return f"the NKI {spec['kind']} kernel does not handle this shape: {why}"
    count = module.unrolled(spec)
    if count > nki_matmul.MAX_UNROLLED:
        return (
            f"the NKI {spec['kind']} kernel would unroll {count} matmul instructions at this shape (every tile "
            f"loop unrolls when traced, NKI 0.7), over neuron-sweep's bound of {nki_matmul.MAX_UNROLLED}"
        )
    version = nki_matmul.nki_version() if version is None else version
    if target and target not in TRN2_AND_LATER and version and version >= TRN2_ONLY_FROM:
        return (
            f"NKI {'.'.join(map(str, version))} (SDK 2.33+) supports Trn2 and Trn3 only, and this run's target "
            f"is {target}; profile impl: compiler here, or run the NKI cases on a trn2/trn3"
        )
    return None
