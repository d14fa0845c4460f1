"""NKI kernels (neuron backend only). Imported lazily: `nki` exists only on Neuron machines."""


def for_spec(spec: dict):
    """The NKI kernel module of a workload kind: ARG_NAMES, make_kernel, supported, inputs, reference."""
    from . import nki_matmul, nki_mlp

    return {"matmul": nki_matmul, "mlp": nki_mlp}[spec["kind"]]
