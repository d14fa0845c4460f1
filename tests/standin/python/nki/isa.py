"""nki.isa double (standalone nki >= 0.2): the destination-passing instructions the kernels use, with
the documented signatures and memory rules, executed on numpy (fp32 accumulation, as TensorE's PSUM)."""

import numpy as np

from . import language as nl


def _where(t, allowed, what):
    buffer = getattr(t, "buffer", nl.hbm)
    if buffer not in allowed:
        raise ValueError(f"nisa.{what}: operand in {buffer}, must be in {' or '.join(allowed)}")


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, dge_mode=None, name=None):
    if dst.shape != src.shape:
        raise ValueError(f"nisa.dma_copy: dst {dst.shape} and src {src.shape} differ")
    dst[...] = np.asarray(src).astype(dst.dtype) if dst_rmw_op is None else dst_rmw_op(dst, src)


def tensor_copy(dst, src, engine=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "tensor_copy")
    _where(src, (nl.sbuf, nl.psum), "tensor_copy")
    dst[...] = np.asarray(src).astype(dst.dtype)


def memset(dst, value, engine=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "memset")
    dst[...] = value


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=None,
    name=None,
):
    """dst (PSUM) += stationary.T @ moving (both SBUF); K on the partitions, stationary free <= 128,
    moving free <= 512. accumulate=False overwrites."""
    _where(dst, (nl.psum,), "nc_matmul dst")
    _where(stationary, (nl.sbuf,), "nc_matmul stationary")
    _where(moving, (nl.sbuf,), "nc_matmul moving")
    (k, m), (k2, n) = stationary.shape, moving.shape
    if k != k2 or k > 128 or m > 128 or n > 512:
        raise ValueError(
            f"nisa.nc_matmul: stationary {stationary.shape} and moving {moving.shape} break the "
            "TensorE limits (shared partition dim <= 128, stationary free <= 128, moving free <= 512)"
        )
    if dst.shape != (m, n):
        raise ValueError(f"nisa.nc_matmul: dst {dst.shape} must be {(m, n)}")
    product = np.asarray(stationary, np.float32).T @ np.asarray(moving, np.float32)
    dst[...] = product if accumulate is False else np.asarray(dst, np.float32) + product


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "activation")
    x = np.asarray(data, np.float32) * scale + (0.0 if bias is None else np.asarray(bias, np.float32))
    dst[...] = op(x).astype(dst.dtype)


def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "tensor_tensor")
    dst[...] = op(np.asarray(data1, np.float32), np.asarray(data2, np.float32)).astype(dst.dtype)
