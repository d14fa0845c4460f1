"""Tiled NKI matmul, result[M,N] = lhsT[K,M].T @ rhs[K,N], after the NKI matmul tutorial's layout:
the contraction dim K on the 128 SBUF partitions, M in tiles of 128 (stationary), N in tiles of up
to 512 (moving, one PSUM bank of fp32). The argument names (lhsT, rhs) are the NEFF's input names,
so capture passes inputs saved under them.

Two spellings of one kernel: standalone `nki` (>= 0.2, SDK 2.28+) passes destinations to every ISA
instruction (nisa.dma_copy, nisa.nc_matmul(dst=psum), nisa.tensor_copy) and has no nl.load/store
return style; the legacy neuronxcc.nki (SDK <= 2.27) returns values. The stand-in executes the
first on numpy (tests/standin/python/nki); on a device the build compares both with numpy.

PSUM: nc_matmul's `accumulate=None` (the default, SDK 2.30-2.33 reference) lets the compiler make the
first matmul into a PSUM tile overwrite and the later ones add; inside the device loop (NKI 0.6+), whose one
traced body serves every iteration, the kernels say it outright (False for the first, True after). A
memset before accumulating is what the reference forbids: matmul accumulation onto PSUM initialized by a
non-matmul instruction is undefined on NeuronCore-v2/v3. The legacy spelling keeps Beta 1's
`acc = nl.zeros(psum); acc += nc_matmul(...)`, the pattern that language's own tutorials use and its
compiler lowers.

Targets: standalone `nki` is documented for Trn2 and Trn3 (NKI FAQ, SDK 2.29+); on trn1/inf2 the build
still compiles it for NEURON_PLATFORM_TARGET_OVERRIDE=trn1|inf2, which the package accepts, and the
correctness check on the build's output is what vouches for the result there. neuronxcc.nki (<= 2.27)
documents Inf2, Trn1 and Trn2.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.matmul import Gemm

if TYPE_CHECKING:
    import numpy as np

ARG_NAMES = ("lhsT", "rhs")
P, TN_MAX = 128, 512  # partitions (contraction, stationary free), moving free size (one PSUM bank)


def nki_version() -> tuple[int, ...] | None:
    """The installed standalone `nki` package's version, from its metadata (no import), or None."""
    import importlib.metadata
    import re

    try:
        return tuple(int(x) for x in re.findall(r"\d+", importlib.metadata.version("nki"))[:3])
    except importlib.metadata.PackageNotFoundError:
        return None


NKI_DEVICE_LOOPS = (0, 6)  # NKI 0.6 (SDK 2.32): nl.fori_loop arrives; 0.7 makes affine_range & co. Python range


def device_loop(version: tuple[int, ...] | None = None) -> bool:
    """Whether our kernels' outer tile loop is a loop on the device (nl.fori_loop, NKI 0.6+).

    nl.fori_loop and nl.while_loop arrived in NKI 0.6.0 (the NKI release notes of SDK 2.32.0: "now
    available", replacing loops over nl.dynamic_range); NKI 0.7 then deprecates nl.affine_range,
    sequential_range and static_range, which default to Python `range` there, unrolled when the kernel is
    traced ("NKI Loops"). The compiled loop's body is traced once and receives the iteration as an
    NkiScalar, read "as a scalar_offset into a tensor" (nl.fori_loop's page). So from 0.6 the outer loop
    (matmul: M tiles; mlp: token tiles) runs on the device and addresses its tiles with `tensor.ap(...,
    scalar_offset=, indirect_dim=)` on a reshaped view, as AWS's kernels do (nki-library:
    moe_cte/bwmm_shard_on_I, fgcc); the inner loops stay Python and unroll inside the body. Before 0.6
    every loop is affine_range (no loop-carried dependency: the compiler may pipeline it). The field
    test's `NKI loops` line settles on a device that the loop's output is right."""
    version = nki_version() if version is None else version
    return bool(version and version >= NKI_DEVICE_LOOPS)


def loops(api: str, version: tuple[int, ...] | None = None) -> str:
    """What build.json says of the kernel's loops (the field test shows it beside the device's verdict)."""
    if api != "nki":
        return "nl.affine_range (neuronxcc.nki)"
    if device_loop(version):
        return "nl.fori_loop over the outer tiles (scalar_offset addressing), Python range inside"
    return "nl.affine_range"


# Matmul instructions the traced kernel holds beyond which a grid point is unsupported, without a device
# loop (before NKI 0.6): the compiler may unroll affine_range, so compile time and the instruction stream
# grow with the trip count. Our bound, not an SDK limit (none is documented). A device loop's body is
# bounded by what it keeps on chip instead (body_bytes against the target's partition, kernels/__init__.py).
MAX_UNROLLED = 4096


def tiles(g: Gemm) -> tuple[int, int]:
    """The largest M and N tiles of this case (suites.matmul.nki_tile; the hardware's limits by default:
    128 stationary free, 512 moving free)."""
    return g.tile_m or P, g.tile_n or TN_MAX


def unrolled(g: Gemm, on_device: bool = False) -> int:
    """nc_matmul instructions the traced kernel holds: every tile, or one body of the device loop over M."""
    tile_m, tile_n = tiles(g)
    return (1 if on_device else max(1, g.m // tile_m)) * max(1, g.k // P) * max(1, g.n // tile_n)


def body_bytes(g: Gemm) -> dict[str, int]:
    """Bytes per partition one body of the device loop (one M tile) keeps live at its peak, counted as the
    stand-in counts a tile (from its allocation until the next tile of its name replaces it): SBUF, the lhs
    and rhs tiles of two consecutive K steps and the result tiles of two N steps; PSUM, the accumulators
    of two N steps. Every live tensor of the body stays on chip for the whole loop (NKI Dynamic Loops)."""
    tile_m, tile_n = tiles(g)
    tm, tn, b = min(g.m, tile_m), min(g.n, tile_n), DTYPE_BYTES[g.dtype]
    return {"sbuf": 2 * (tm + tn) * b + 2 * tn * b, "psum": 2 * tn * 4}


def load_nki() -> tuple[ModuleType, ModuleType, ModuleType, str]:
    """(nki, nl, nisa, api): the standalone `nki` package (SDK 2.28+) or the legacy neuronxcc.nki."""
    try:
        import nki
        import nki.isa as nisa
        import nki.language as nl

        return nki, nl, nisa, "nki"
    except ImportError:
        pass
    try:
        import neuronxcc.nki as nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl
    except ImportError:
        raise UserError(
            "the NKI kernels need the standalone nki package (SDK 2.28+), and neither it nor the legacy neuronxcc.nki "
            "imports here (Neuron SDK 2.34 removed neuronxcc.nki: announce-removal-neuronxcc-nki-2-34); pip install "
            "nki from the Neuron repository, or activate the SDK's environment."
        ) from None
    return nki, nl, nisa, "neuronxcc.nki"


def make_kernel(decorate: Callable | None = None, tile_m: int = P, tile_n: int = TN_MAX) -> Callable:
    """The kernel under `decorate` (default nki.jit; the legacy route passes nki.benchmark(...)), its
    M and N tiles at most tile_m and tile_n (constants of the traced kernel, as the tutorials' are)."""
    nki, nl, nisa, api = load_nki()
    on_device = api == "nki" and device_loop()

    def nki_matmul_tiled(lhsT, rhs):
        K, M = lhsT.shape
        _, N = rhs.shape
        result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        tm, tk, tn = min(M, tile_m), min(K, P), min(N, tile_n)

        # In the device loop the block index m is a device value, used only as a scalar_offset, as the
        # fori_loop page says to read it (no arithmetic: the VirtualRegister some pages pass documents none),
        # into views whose dimension `indirect_dim` counts blocks of tm.
        lhs_blocks = lhsT.reshape((K, M // tm, tm)) if on_device else None
        result_blocks = result.reshape((M // tm, tm, N)) if on_device else None

        def lhs_block(k, m):  # lhsT[k*tk : (k+1)*tk, m*tm : (m+1)*tm]
            if lhs_blocks is not None:  # on the device
                return lhs_blocks.ap(pattern=[[M, tk], [1, tm]], offset=k * tk * M, scalar_offset=m, indirect_dim=1)
            return lhsT[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm]

        def result_block(m, n):  # result[m*tm : (m+1)*tm, n*tn : (n+1)*tn]
            if result_blocks is not None:  # on the device
                return result_blocks.ap(pattern=[[N, tm], [1, tn]], offset=n * tn, scalar_offset=m, indirect_dim=0)
            return result[m * tm : (m + 1) * tm, n * tn : (n + 1) * tn]

        def row_block(m) -> None:
            for n in (range if on_device else nl.affine_range)(N // tn):
                acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)  # no memset: see PSUM above
                for k in (range if on_device else nl.affine_range)(K // tk):
                    lhs_tile = nl.ndarray((tk, tm), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=lhs_tile, src=lhs_block(k, m))
                    rhs_tile = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=rhs_tile, src=rhs[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
                    # k=0 overwrites, then adds: said outright in the device loop (k is a Python int there),
                    # where one traced body serves every iteration; left to the compiler (None) before 0.6
                    add = k > 0 if on_device else None
                    nisa.nc_matmul(dst=acc, stationary=lhs_tile, moving=rhs_tile, accumulate=add)
                out = nl.ndarray((tm, tn), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=out, src=acc)
                nisa.dma_copy(dst=result_block(m, n), src=out)

        if on_device:
            nl.fori_loop(0, M // tm, row_block)
        else:
            for m in nl.affine_range(M // tm):
                row_block(m)
        return result

    def nki_matmul_tiled_legacy(lhsT, rhs):
        K, M = lhsT.shape
        _, N = rhs.shape
        result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        tm, tk, tn = min(M, tile_m), min(K, P), min(N, tile_n)
        for m in nl.affine_range(M // tm):
            for n in nl.affine_range(N // tn):
                acc = nl.zeros((tm, tn), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // tk):
                    lhs_tile = nl.load(lhsT[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm])
                    rhs_tile = nl.load(rhs[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
                    acc += nisa.nc_matmul(lhs_tile, rhs_tile)
                nl.store(result[m * tm : (m + 1) * tm, n * tn : (n + 1) * tn], value=nl.copy(acc, dtype=result.dtype))
        return result

    return (decorate or nki.jit)(nki_matmul_tiled if api == "nki" else nki_matmul_tiled_legacy)


def inputs(g: Gemm, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The kernel's inputs by argument name (lhsT is A transposed: K on the partitions), float32 from `rng`."""
    import numpy as np

    return {
        "lhsT": rng.standard_normal((g.k, g.m), dtype=np.float32),
        "rhs": rng.standard_normal((g.k, g.n), dtype=np.float32),
    }


def reference(a: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 result the kernel's output is checked against."""
    import numpy as np

    return a["lhsT"].astype(np.float64).T @ a["rhs"].astype(np.float64)


def workload_view(a: dict[str, np.ndarray], out: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The kernel's inputs and output as the matmul workload names them (A = lhsT^T, B = rhs, C)."""
    return {"a": a["lhsT"].T, "b": a["rhs"]}, out


def supported(g: Gemm, on_device: bool = False) -> str | None:
    """None if the kernel handles the shape, else why not (it does not pad partial tiles; with a device loop
    or without, alike)."""
    m, k, n = g.m, g.k, g.n
    tile_m, tile_n = tiles(g)
    problems = [
        f"{name}={v} is not a multiple of {t} (or smaller than it)"
        for name, v, t in (("M", m, tile_m), ("K", k, P), ("N", n, tile_n))
        if v > t and v % t
    ]
    return "; ".join(problems) or None
