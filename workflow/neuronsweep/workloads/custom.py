"""A user's own PyTorch function as a workload (`suites.custom`): the inputs' shapes, the keyword params
and the dtype make one case; its FLOPs come from the config's expression or from PyTorch's FLOP counter on
fake tensors (counted when the run is planned, custom_probe.py), its bytes from its inputs and outputs.

The spec carries what the plan found (output shapes, FLOPs and where they came from) and the sha256 of
the function's source file, so an edit of that file changes the spec of that suite's cases only: their
builds rerun, and the compile cache key changes with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neuronsweep.store.specs import CustomSpec
from neuronsweep.workloads.descriptor import Workload
from neuronsweep.workloads.user_code import load

DESCRIPTOR = Workload("custom", user_code=True, real_inputs=True)  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch

COUNTED_BY = "torch.utils.flop_counter on fake tensors"


def spec(
    name: str,
    function: str,
    source_sha256: str,
    dims: dict,
    inputs: dict,
    params: dict,
    dtype: str,
    outputs: list,
    flops: int | None,
    flops_source: str,
    impl: str = "compiler",
    nki_kernel: str | None = None,
) -> CustomSpec:
    """A user's function as a spec: its import path and source digest (an edit rebuilds), dims, input shapes, params,
    dtype, output shapes and FLOPs with where they came from."""
    s: CustomSpec = {
        "kind": "custom",
        "name": name,
        "function": function,
        "source_sha256": source_sha256,
        # pairs, not mappings: the id keeps the config's order through canonical (sorted-key) JSON
        "dims": [[k, v] for k, v in dims.items()],
        "inputs": [[k, list(v)] for k, v in inputs.items()],
        "params": [[k, v] for k, v in params.items()],
        "dtype": dtype,
        "outputs": outputs,
        "flops": flops,
        "flops_source": flops_source,
    }
    if impl != "compiler":
        s["impl"] = impl
        s["nki_kernel"] = nki_kernel
    return s


@dataclass(frozen=True)
class Call:
    """A user's function case read once (plan.json's spec): the function and its source digest, the dims, the
    inputs' and outputs' shapes and the keyword params (in the config's order), the dtype, its FLOPs with where
    they came from, and the user's NKI kernel where it has one."""

    name: str
    function: str
    dims: tuple[tuple[str, Any], ...]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    params: tuple[tuple[str, Any], ...]
    dtype: str
    outputs: tuple[tuple[int, ...], ...]
    flops: int | None
    flops_source: str
    impl: str = "compiler"
    nki_kernel: str | None = None

    @classmethod
    def of(cls, s: CustomSpec) -> Call:
        """The record of a user's function's spec."""
        return cls(
            name=s["name"],
            function=s["function"],
            dims=tuple((k, v) for k, v in s["dims"]),
            inputs=tuple((k, tuple(shape)) for k, shape in s["inputs"]),
            params=tuple((k, v) for k, v in s["params"]),
            dtype=s["dtype"],
            outputs=tuple(tuple(shape) for shape in s["outputs"]),
            flops=s["flops"],
            flops_source=s["flops_source"],
            impl=s.get("impl", "compiler"),
            nki_kernel=s.get("nki_kernel"),
        )


RECORD = Call  # what the package's functions hand this module's (workloads/__init__.py)


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def workload_id(c: Call) -> str:
    """custom-<name>-<dim><value>...-<param><value>...-<dtype>[-nki]: readable and stable."""
    parts = [f"{k}{_value(v)}" for k, v in [*c.dims, *c.params]]
    ident = "-".join(["custom", c.name, *parts, c.dtype]).lower()
    return ident + ("-nki" if c.impl == "nki" else "")


def flops(c: Call) -> int | None:
    """The FLOPs the config's expression (or the counter) gave; None when neither did."""
    return c.flops


def has_roofline(c: Call) -> bool:
    """Whether the function has FLOPs to place on a roofline."""
    return bool(c.flops)


def no_roofline_why(c: Call) -> str:
    """Why the case has no roofline, and the key that would give it one."""
    return f"no FLOPs for {c.name}: {c.flops_source}; give the suite a flops expression"


def counted_how(c: Call) -> tuple[str, str]:
    """(where the FLOPs came from, where the bytes came from), for metrics.json's notes."""
    return c.flops_source, "every input read once and every output written once, at the case's dtype"


def tensor_shapes(c: Call) -> dict[str, tuple[int, ...]]:
    """Each input's and output's shape by name (outputs as out0, out1, ...)."""
    return dict(c.inputs) | {f"out{i}": shape for i, shape in enumerate(c.outputs)}


def input_names(c: Call) -> list[str]:
    """The function's input names, in the config's order."""
    return [n for n, _ in c.inputs]


def params(c: Call) -> dict[str, Any]:
    """The keyword arguments the function is called with."""
    return dict(c.params)


def min_bytes(c: Call, dtype_bytes: int) -> int:
    """Bytes the call must move at least: every input and output once."""
    return sum(math.prod(shape) for shape in tensor_shapes(c).values()) * dtype_bytes


def gemms(c: Call) -> list[tuple[int, int, int]]:
    """No GEMMs: the tile model cannot see into a user's function."""
    return []  # the tile model knows GEMMs; a user's function is whatever it is


def torch_module(c: Call) -> torch.nn.Module:
    """The user's function as an nn.Module: forward takes the inputs in the config's order and calls the
    function with them by name and with the case's params as keywords."""
    import torch

    fn, names, kwargs = load(c.function), input_names(c), params(c)

    class UserFunction(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> Any:
            return fn(**dict(zip(names, args, strict=True)), **kwargs)

    return UserFunction()


ROW_INPUT = None  # a user's function may mix rows: the whole output is checked


class NotComparable(Exception):
    """The function's output is not a tensor or a tuple of tensors: nothing to check it against."""


def output_array(out: object) -> np.ndarray:
    """The output as one flat float64 array (a tensor, or a tuple or list of tensors, concatenated)."""
    import numpy as np

    parts = out if isinstance(out, tuple | list) else (out,)
    if not parts or not all(hasattr(p, "detach") or isinstance(p, np.ndarray) for p in parts):
        raise NotComparable(f"the function returned {type(out).__name__}, not a tensor or a tuple of tensors")
    return np.concatenate(
        [(p.detach().to("cpu").double().numpy() if hasattr(p, "detach") else p).ravel() for p in parts]
    )


def reference(c: Call, a: Mapping[str, np.ndarray]) -> Any:
    """The user's own function in float64 on the CPU, on the case's inputs: the reference every
    implementation (the compiler's, an NKI kernel's) is checked against."""
    import torch

    fn = load(c.function)
    out = fn(**{n: torch.from_numpy(a[n]) for n in input_names(c)}, **params(c))
    return output_array(out)
