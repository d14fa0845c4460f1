"""One step, three ways: y_t = relu(x_t @ W) + 0.1 for t in 0..T-1, over X = [T, batch, features].

`vmap` vectorizes the steps, `scan` runs them as a loop primitive (XLA while on torch-xla), and
`for_loop` unrolls them in Python, so all three compute exactly the same Y = [T, batch, features]
under the same conditions and can be compared fairly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuronsweep.store.specs import LoopsSpec
from neuronsweep.workloads.descriptor import Workload

DESCRIPTOR = Workload("loops")  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch


def spec(pattern: str, steps: int, batch: int, features: int, dtype: str) -> LoopsSpec:
    """A loops case: the loop pattern (vmap, scan, for), steps, batch, features and dtype."""
    return {
        "kind": "loops",
        "pattern": pattern,
        "steps": int(steps),
        "batch": int(batch),
        "features": int(features),
        "dtype": dtype,
    }


@dataclass(frozen=True)
class Loop:
    """A loops case's spec read once (plan.json's): the pattern, the steps and each step's batch x features."""

    pattern: str  # vmap, scan or for_loop
    steps: int
    batch: int
    features: int
    dtype: str

    @classmethod
    def of(cls, s: LoopsSpec) -> Loop:
        """The record of a loops case's spec."""
        return cls(s["pattern"], s["steps"], s["batch"], s["features"], s["dtype"])


RECORD = Loop  # what the package's functions hand this module's (workloads/__init__.py)


def workload_id(x: Loop) -> str:
    """loops-<pattern>-t<steps>-b<batch>-f<features>-<dtype>."""
    return f"loops-{x.pattern.replace('_', '')}-t{x.steps}-b{x.batch}-f{x.features}-{x.dtype}"


def tensor_shapes(x: Loop) -> dict[str, tuple[int, ...]]:
    """x (steps, batch, features), w (features, features) and the output."""
    t, b, f = x.steps, x.batch, x.features
    return {"x": (t, b, f), "w": (f, f), "out": (t, b, f)}


def input_names(x: Loop) -> list[str]:
    """x and w."""
    return ["x", "w"]


def flops(x: Loop) -> int:
    """The GEMM per step, plus relu and the add (one op per output element each)."""
    t, b, f = x.steps, x.batch, x.features
    return t * (2 * b * f * f + 2 * b * f)


def min_bytes(x: Loop, dtype_bytes: int) -> int:
    """x and the output once each, and w once."""
    t, b, f = x.steps, x.batch, x.features
    return (2 * t * b * f + f * f) * dtype_bytes


def gemms(x: Loop) -> list[tuple[int, int, int]]:
    """One (batch, features, features) GEMM per step."""
    return [(x.batch, x.features, x.features)] * x.steps


def torch_module(loop: Loop) -> torch.nn.Module:
    """The loop as a torch module in the spec's pattern."""
    import torch

    try:  # torch has no public scan yet; this is the primitive torch.export and torch-xla lower
        from torch._higher_order_ops.scan import scan
    except ImportError:
        scan = None  # type: ignore[assignment]  # an older torch: only the scan pattern needs it
    if loop.pattern == "scan" and scan is None:
        raise RuntimeError(f"torch {torch.__version__} has no scan primitive (torch._higher_order_ops.scan)")

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) + 0.1

    class VMap(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.vmap(step, in_dims=(0, None))(x, w)

    class Scan(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            def body(carry: torch.Tensor, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return carry.clone(), step(x_t, w)  # scan rejects an output that aliases its input

            _, ys = scan(body, torch.zeros((), dtype=x.dtype), x)
            return ys

    class ForLoop(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.stack([step(x[t], w) for t in range(x.shape[0])])

    return {"vmap": VMap, "scan": Scan, "for_loop": ForLoop}[loop.pattern]()


ROW_INPUT = "x"  # output row i depends only on its row i (the correctness check samples rows)


def reference(loop: Loop, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float64 NumPy steps of the same inputs: one expression for all three patterns."""
    import numpy as np

    return np.maximum(a["x"] @ a["w"], 0.0) + 0.1
