"""GEMM workload: C[M,N] = A[M,K] @ B[K,N]."""

from __future__ import annotations


def spec(m: int, k: int, n: int, dtype: str, impl: str = "compiler") -> dict:
    """The canonical spec; `impl` appears only for the NKI kernel, so compiler specs stay as they were."""
    s = {"kind": "matmul", "m": int(m), "k": int(k), "n": int(n), "dtype": dtype}
    if impl != "compiler":
        s["impl"] = impl
    return s


def workload_id(s: dict) -> str:
    suffix = f"-{s['impl']}" if s.get("impl") else ""
    return f"matmul-m{s['m']}-k{s['k']}-n{s['n']}-{s['dtype']}{suffix}"


def flops(s: dict) -> int:
    """2·M·K·N: one multiply and one add per inner-product term."""
    return 2 * s["m"] * s["k"] * s["n"]


def tensor_shapes(s: dict) -> dict[str, tuple[int, ...]]:
    """Input and output tensors by name, in call order for inputs."""
    return {"a": (s["m"], s["k"]), "b": (s["k"], s["n"]), "out": (s["m"], s["n"])}


def input_names(s: dict) -> list[str]:
    return ["a", "b"]


def min_bytes(s: dict, dtype_bytes: int) -> int:
    """Minimal memory traffic: read A and B once, write C once."""
    m, k, n = s["m"], s["k"], s["n"]
    return (m * k + k * n + m * n) * dtype_bytes


def gemms(s: dict) -> list[tuple[int, int, int]]:
    return [(s["m"], s["k"], s["n"])]


def torch_module(s: dict):
    """An nn.Module whose forward is the GEMM, so torch.export sees exactly one aten.matmul."""
    import torch

    class MatMul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    return MatMul()
