"""NKI kernels (neuron backend only). `nki` itself is imported only when a kernel is made: it exists
only on Neuron machines."""

from neuronsweep.kernels import nki_matmul, nki_mlp


def for_spec(spec: dict):
    """The NKI kernel module of a workload kind: ARG_NAMES, make_kernel, supported, inputs, reference."""
    return {"matmul": nki_matmul, "mlp": nki_mlp}[spec["kind"]]


def unsupported(spec: dict) -> str | None:
    """Why the NKI kernel of this workload cannot run its shape, or None (an `impl: nki` spec only)."""
    why = for_spec(spec).supported(spec)
    return f"the NKI {spec['kind']} kernel does not handle this shape: {why}" if why else None
