"""Tiled NKI matmul, result[M,N] = lhsT[K,M].T @ rhs[K,N], after the NKI matmul tutorial's layout:
the contraction dim K on the 128 SBUF partitions, M in tiles of 128 (stationary), N in tiles of up
to 512 (moving, one PSUM bank of fp32). The argument names (lhsT, rhs) are the NEFF's input names,
so capture passes inputs saved under them.
"""

from __future__ import annotations

ARG_NAMES = ("lhsT", "rhs")


def load_nki():
    """(nki, nl, nisa): the standalone `nki` package (SDK 2.28+) or the legacy neuronxcc.nki."""
    try:
        import nki
        import nki.isa as nisa
        import nki.language as nl
        return nki, nl, nisa, "nki"
    except ImportError:
        import neuronxcc.nki as nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl
        return nki, nl, nisa, "neuronxcc.nki"


def make_kernel(decorate=None):
    """The kernel under `decorate` (default nki.jit; the legacy route passes nki.benchmark(...))."""
    nki, nl, nisa, _ = load_nki()

    def nki_matmul_tiled(lhsT, rhs):
        K, M = lhsT.shape
        K_, N = rhs.shape
        assert K == K_, "lhsT and rhs must share the contraction dimension"
        result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        tile_m = min(M, nl.tile_size.gemm_stationary_fmax)  # 128
        tile_k = min(K, nl.tile_size.pmax)  # 128
        tile_n = min(N, nl.tile_size.gemm_moving_fmax)  # 512
        for m in nl.affine_range(M // tile_m):
            for n in nl.affine_range(N // tile_n):
                acc = nl.zeros((tile_m, tile_n), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // tile_k):
                    lhs_tile = nl.load(lhsT[k * tile_k:(k + 1) * tile_k, m * tile_m:(m + 1) * tile_m])
                    rhs_tile = nl.load(rhs[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                    acc += nisa.nc_matmul(lhs_tile, rhs_tile)
                out = nl.copy(acc, dtype=result.dtype)
                nl.store(result[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], value=out)
        return result

    return (decorate or nki.jit)(nki_matmul_tiled)


def inputs(spec: dict, rng) -> dict:
    import numpy as np

    return {"lhsT": rng.standard_normal((spec["k"], spec["m"]), dtype=np.float32),
            "rhs": rng.standard_normal((spec["k"], spec["n"]), dtype=np.float32)}


def reference(a: dict):
    import numpy as np

    return a["lhsT"].astype(np.float32).T @ a["rhs"].astype(np.float32)


def supported(spec: dict) -> str | None:
    """None if the kernel handles the shape, else why not (it does not pad partial tiles)."""
    m, k, n = spec["m"], spec["k"], spec["n"]
    problems = [f"{name}={v} is not a multiple of {t} (or smaller than it)" for name, v, t in
                (("M", m, 128), ("K", k, 128), ("N", n, 512)) if v > t and v % t]
    return "; ".join(problems) or None
