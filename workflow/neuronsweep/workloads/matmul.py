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
from typing import TYPE_CHECKING

from neuronsweep.store.specs import MatmulSpec
from neuronsweep.workloads.descriptor import Workload

DESCRIPTOR = Workload("matmul", nki_tiles=True)  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch

NKI_TILE = {"m": 128, "n": 512}  # the NKI kernel's largest tiles (kernels/nki_matmul.py), its default


@dataclass(frozen=True)
class Gemm:
    """A matmul's spec read once (plan.json's): its shape and dtype, its implementation, whether its graph
    varies per call, and its NKI tiles where the spec sets them (None: the kernel's largest)."""

    m: int
    k: int
    n: int
    dtype: str
    impl: str = "compiler"
    varies: str = "static"
    tile_m: int | None = None
    tile_n: int | None = None

    @classmethod
    def of(cls, s: MatmulSpec) -> Gemm:
        """The record of a matmul's spec."""
        return cls(
            s["m"],
            s["k"],
            s["n"],
            s["dtype"],
            s.get("impl", "compiler"),
            s.get("varies", "static"),
            s.get("tile_m"),
            s.get("tile_n"),
        )


RECORD = Gemm  # what the package's functions hand this module's (workloads/__init__.py)


def spec(
    m: int, k: int, n: int, dtype: str, impl: str = "compiler", varies: str = "static", nki_tile: dict | None = None
) -> MatmulSpec:
    """The canonical spec; `impl`, `varies` and the NKI kernel's tile sizes (impl nki) appear only when
    not the default, so plain specs (and their ids and cache keys) stay as they were."""
    s: MatmulSpec = {"kind": "matmul", "m": int(m), "k": int(k), "n": int(n), "dtype": dtype}
    if impl != "compiler":
        s["impl"] = impl
    if varies != "static":
        s["varies"] = varies
    if impl == "nki":
        for dim, size in (nki_tile or {}).items():  # in the config's order, as the spec's keys were
            if int(size) != NKI_TILE[dim]:
                if dim == "m":
                    s["tile_m"] = int(size)
                else:
                    s["tile_n"] = int(size)
    return s


def workload_id(g: Gemm) -> str:
    """matmul-m<m>-k<k>-n<n>-<dtype>, with the impl and any NKI tile size that is not the default."""
    suffix = f"-{g.impl}" if g.impl != "compiler" else ""
    suffix += "".join(f"-t{dim}{size}" for dim, size in (("m", g.tile_m), ("n", g.tile_n)) if size is not None)
    suffix += f"-varies-{g.varies.replace('_', '')}" if g.varies != "static" else ""
    return f"matmul-m{g.m}-k{g.k}-n{g.n}-{g.dtype}{suffix}"


def flops(g: Gemm) -> int:
    """2·M·K·N: one multiply and one add per inner-product term (plus the scaling of python_float)."""
    return 2 * g.m * g.k * g.n + (g.m * g.n if g.varies == "python_float" else 0)


def tensor_shapes(g: Gemm) -> dict[str, tuple[int, ...]]:
    """Input and output tensors by name, in call order for inputs."""
    return {"a": (g.m, g.k), "b": (g.k, g.n), "out": (g.m, g.n)}


def input_names(g: Gemm) -> list[str]:
    """a and b."""
    return ["a", "b"]


def min_bytes(g: Gemm, dtype_bytes: int) -> int:
    """Minimal memory traffic: read A and B once, write C once."""
    return (g.m * g.k + g.k * g.n + g.m * g.n) * dtype_bytes


def gemms(g: Gemm) -> list[tuple[int, int, int]]:
    """The one (m, k, n) GEMM."""
    return [(g.m, g.k, g.n)]


def torch_module(g: Gemm) -> torch.nn.Module:
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
            if g.varies == "python_int":
                return torch.roll(a @ b, shifts=self.calls, dims=0)
            return (a @ b) * (1.0 + self.calls / 1024)

    return Varying() if g.varies != "static" else MatMul()


ROW_INPUT = "a"  # output row i depends only on its row i (the correctness check samples rows)


def reference(g: Gemm, a: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The float64 NumPy result of the same inputs (None for a workload that varies between calls)."""
    return None if g.varies != "static" else a["a"] @ a["b"]
