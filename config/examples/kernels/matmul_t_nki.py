"""An NKI kernel for suites.custom's `impl: nki` (runs on a Neuron device, trn2/trn3 with NKI 0.7): result
[M, N] = lhsT.T @ rhs, tiled 128 x 128 over M and K and `tile_n` (at most 512, one PSUM bank) over N. The
tile size is a keyword meta-parameter, as in the NKI matmul tutorial; neuron-sweep passes the case's params
as keywords, the inputs positionally, and checks the output against matmul_t.py's PyTorch function.
Loops are Python `range`: NKI 0.7 unrolls them when it traces the kernel (affine_range is deprecated)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_t_kernel(lhsT, rhs, tile_n=512):
    """lhsT.T @ rhs in HBM: 128 x 128 tiles over M and K, tile_n over N, accumulated in PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    assert M % 128 == 0 and K % 128 == 0 and N % tile_n == 0 and tile_n <= 512
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // 128):
        for n in range(N // tile_n):
            acc = nl.ndarray((128, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // 128):
                lhs_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs_tile, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                rhs_tile = nl.ndarray((128, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * 128 : (k + 1) * 128, n * tile_n : (n + 1) * tile_n])
                nisa.nc_matmul(dst=acc, stationary=lhs_tile, moving=rhs_tile)  # k = 0 overwrites, then adds
            out = nl.ndarray((128, tile_n), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * 128 : (m + 1) * 128, n * tile_n : (n + 1) * tile_n], src=out)
    return result
