"""Gated MLP (LLaMA-style FFN): out = (silu(x @ W_gate) * (x @ W_up)) @ W_down, x = [b*s, h].

The weights are inputs, not parameters, so the build exports from meta tensors (no memory) and
capture feeds them like activations; FLOPs count the three GEMMs (the elementwise work is <1%).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuronsweep.store.specs import MlpSpec
from neuronsweep.workloads.descriptor import Workload

DESCRIPTOR = Workload("mlp")  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch


@dataclass(frozen=True)
class GatedMlp:
    """A gated MLP's spec read once (plan.json's): batch, sequence, hidden and intermediate sizes and dtype."""

    b: int
    s: int
    h: int
    i: int
    dtype: str
    impl: str = "compiler"

    @classmethod
    def of(cls, spec: MlpSpec) -> GatedMlp:
        """The record of an MLP's spec."""
        return cls(spec["b"], spec["s"], spec["h"], spec["i"], spec["dtype"], spec.get("impl", "compiler"))

    @property
    def tokens(self) -> int:
        """The rows it runs: batch x sequence."""
        return self.b * self.s


RECORD = GatedMlp  # what the package's functions hand this module's (workloads/__init__.py)


def spec(b: int, s: int, h: int, i: int, dtype: str, impl: str = "compiler") -> MlpSpec:
    """A gated MLP case: batch, sequence, hidden and intermediate sizes, dtype, and the implementation when not the
    compiler's."""
    out: MlpSpec = {"kind": "mlp", "b": int(b), "s": int(s), "h": int(h), "i": int(i), "dtype": dtype}
    if impl != "compiler":
        out["impl"] = impl
    return out


def workload_id(g: GatedMlp) -> str:
    """mlp-b<b>-s<s>-h<h>-i<i>-<dtype>, with the impl when not the compiler's."""
    suffix = f"-{g.impl}" if g.impl != "compiler" else ""
    return f"mlp-b{g.b}-s{g.s}-h{g.h}-i{g.i}-{g.dtype}{suffix}"


def tensor_shapes(g: GatedMlp) -> dict[str, tuple[int, ...]]:
    """x (tokens, hidden), the gate, up and down weights, and the output."""
    t, h, i = g.tokens, g.h, g.i
    return {"x": (t, h), "w_gate": (h, i), "w_up": (h, i), "w_down": (i, h), "out": (t, h)}


def intermediate_shapes(g: GatedMlp) -> dict[str, tuple[int, ...]]:
    """Activations alive at once inside the block: gate and up projections, [b*s, i] each."""
    return {"gate": (g.tokens, g.i), "up": (g.tokens, g.i)}


def input_names(g: GatedMlp) -> list[str]:
    """x and the three weights."""
    return ["x", "w_gate", "w_up", "w_down"]


def flops(g: GatedMlp) -> int:
    """Three GEMMs of tokens x hidden x intermediate, 2 FLOPs per multiply-add."""
    return 3 * 2 * g.tokens * g.h * g.i


def min_bytes(g: GatedMlp, dtype_bytes: int) -> int:
    """Every input and the output once."""
    return sum(math.prod(shape) for shape in tensor_shapes(g).values()) * dtype_bytes


def gemms(g: GatedMlp) -> list[tuple[int, int, int]]:
    """(M, K, N) of each GEMM, for the tile model."""
    t, h, i = g.tokens, g.h, g.i
    return [(t, h, i), (t, h, i), (t, i, h)]


def torch_module(g: GatedMlp) -> torch.nn.Module:
    """The gated MLP (down(silu(gate(x)) * up(x))) as a torch module."""
    import torch

    class GatedMLP(torch.nn.Module):
        def forward(
            self, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
        ) -> torch.Tensor:
            return (torch.nn.functional.silu(x @ w_gate) * (x @ w_up)) @ w_down

    return GatedMLP()


ROW_INPUT = "x"  # output row i depends only on its row i (the correctness check samples rows)


def reference(g: GatedMlp, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float64 NumPy gated MLP of the same inputs."""
    import numpy as np

    gate = a["x"] @ a["w_gate"]
    return (gate / (1.0 + np.exp(-gate)) * (a["x"] @ a["w_up"])) @ a["w_down"]
