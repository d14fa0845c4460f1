"""GEMM workload: C[M,N] = A[M,K] @ B[K,N].

`varies` (the recompile suite: the recompilation trap) makes the graph depend on how often forward ran:
  python_int    a call counter becomes torch.roll's shift, an attribute baked into the graph,
                so every call is a new graph (a recompile on lazy-tensor backends)
  python_float  the product is scaled by a changing Python float, which torch-xla uploads as
                device data instead of baking it in: the control, expected not to recompile
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neuronsweep.workloads.descriptor import Workload

DESCRIPTOR = Workload("matmul", nki_tiles=True)  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch

NKI_TILE = {"m": 128, "n": 512}  # the NKI kernel's largest tiles (kernels/nki_matmul.py), its default


@dataclass(frozen=True)
class Gemm:
    """A matmul's spec read once (plan.json's): its shape and dtype, and its NKI tiles where the spec sets
    them (None: the kernel's largest)."""

    m: int
    k: int
    n: int
    dtype: str
    tile_m: int | None = None
    tile_n: int | None = None

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> Gemm:
        """The record of a matmul's spec."""
        return cls(s["m"], s["k"], s["n"], s["dtype"], s.get("tile_m"), s.get("tile_n"))


def spec(
    m: int, k: int, n: int, dtype: str, impl: str = "compiler", varies: str = "static", nki_tile: dict | None = None
) -> dict:
    """The canonical spec; `impl`, `varies` and the NKI kernel's tile sizes (impl nki) appear only when
    not the default, so plain specs (and their ids and cache keys) stay as they were."""
    s = {"kind": "matmul", "m": int(m), "k": int(k), "n": int(n), "dtype": dtype}
    if impl != "compiler":
        s["impl"] = impl
    if varies != "static":
        s["varies"] = varies
    if impl == "nki":
        for dim, size in (nki_tile or {}).items():
            if int(size) != NKI_TILE[dim]:
                s[f"tile_{dim}"] = int(size)
    return s


def workload_id(s: dict) -> str:
    """matmul-m<m>-k<k>-n<n>-<dtype>, with the impl and any NKI tile size that is not the default."""
    suffix = f"-{s['impl']}" if s.get("impl") else ""
    suffix += "".join(f"-t{dim}{s[f'tile_{dim}']}" for dim in NKI_TILE if f"tile_{dim}" in s)
    suffix += f"-varies-{s['varies'].replace('_', '')}" if s.get("varies") else ""
    return f"matmul-m{s['m']}-k{s['k']}-n{s['n']}-{s['dtype']}{suffix}"


def flops(s: dict) -> int:
    """2·M·K·N: one multiply and one add per inner-product term (plus the scaling of python_float)."""
    return 2 * s["m"] * s["k"] * s["n"] + (s["m"] * s["n"] if s.get("varies") == "python_float" else 0)


def tensor_shapes(s: dict) -> dict[str, tuple[int, ...]]:
    """Input and output tensors by name, in call order for inputs."""
    return {"a": (s["m"], s["k"]), "b": (s["k"], s["n"]), "out": (s["m"], s["n"])}


def input_names(s: dict) -> list[str]:
    """a and b."""
    return ["a", "b"]


def min_bytes(s: dict, dtype_bytes: int) -> int:
    """Minimal memory traffic: read A and B once, write C once."""
    m, k, n = s["m"], s["k"], s["n"]
    return (m * k + k * n + m * n) * dtype_bytes


def gemms(s: dict) -> list[tuple[int, int, int]]:
    """The one (m, k, n) GEMM."""
    return [(s["m"], s["k"], s["n"])]


def torch_module(s: dict) -> torch.nn.Module:
    """An nn.Module whose forward is the GEMM, so torch.export sees exactly one aten.matmul."""
    import torch

    class MatMul(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    class Varying(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if s["varies"] == "python_int":
                return torch.roll(a @ b, shifts=self.calls, dims=0)
            return (a @ b) * (1.0 + self.calls / 1024)

    return Varying() if s.get("varies") else MatMul()


ROW_INPUT = "a"  # output row i depends only on its row i (the correctness check samples rows)


def reference(s: dict, a: dict) -> np.ndarray | None:
    """The float64 NumPy result of the same inputs (None for a workload that varies between calls)."""
    return None if s.get("varies") else a["a"] @ a["b"]
