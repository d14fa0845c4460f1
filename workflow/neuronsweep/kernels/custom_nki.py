"""A user's own NKI kernel (`nki_kernel` of a suites.custom entry), built by nki_program as our kernels are.

The kernel gets the case's inputs as NumPy arrays, positionally in the order of its own parameters (the
config's `inputs` order where its signature cannot be read), and the case's params as keywords: the
meta-parameter style of the NKI tutorials (`nki_matmul_fully_optimized_(lhsT, rhs, TILES_IN_BLOCK_M=16)`).
A plain function is put under `nki.jit`; an object `nki.jit` already returned (a `Kernel`, nki 0.5+) is
called as it is. Its output is checked against the user's PyTorch `function` in float64 on the CPU
(workloads/custom.py), so the kernel is held to the user's own definition of the computation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from neuronsweep.kernels.nki_matmul import load_nki
from neuronsweep.workloads import custom
from neuronsweep.workloads.user_code import load

LEGACY_WHY = (
    "a suites.custom nki_kernel is built with the standalone nki package (SDK 2.28+, `import nki`); this "
    "machine has only the legacy neuronxcc.nki, whose nki.benchmark runs a kernel on inputs of its own"
)


def arg_names(call: custom.Call, kernel: Callable) -> list[str]:
    """The input names in the order the kernel takes them positionally."""
    names = custom.input_names(call)
    try:
        order = list(inspect.signature(kernel).parameters)
    except (TypeError, ValueError):
        return names
    if not set(names) <= set(order):  # a wrapper's (*args, **kwargs): the config's order is all there is
        return names
    return sorted(names, key=order.index)


def make_kernel(call: custom.Call) -> Callable:
    """The user's kernel, under nki.jit unless it already is."""
    nki = load_nki()[0]
    kernel = load(str(call.nki_kernel))
    return nki.jit(kernel) if inspect.isfunction(kernel) else kernel


def keywords(call: custom.Call) -> dict[str, object]:
    """The kernel's keyword arguments: the case's params, as the tutorials pass meta-parameters."""
    return custom.params(call)


def inputs(call: custom.Call, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs of the case's shapes (cast to its dtype by nki_program)."""
    return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in call.inputs}


def workload_view(a: dict[str, np.ndarray], out: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The kernel's inputs and output are the function's: nothing to rename or transpose."""
    return a, out
