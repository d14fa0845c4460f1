"""nki.isa double (standalone nki >= 0.2): the destination-passing instructions the kernels use, with
the documented signatures and memory rules, executed on numpy (fp32 accumulation, as TensorE's PSUM).

PSUM accumulation as the nc_matmul reference (SDK 2.30-2.33) states it: accumulate=False overwrites,
True adds and is undefined on a location no matmul has written, None lets the compiler decide (the
first write overwrites, later ones add). Accumulating onto PSUM written by memset/tensor_copy (any
non-matmul instruction) is undefined on NeuronCore-v2/v3 (trn1, inf2, trn2): refused here, as the
hardware's result cannot be trusted. Each PSUM tensor remembers what wrote it last."""

import os

import numpy as np

from . import language as nl

NkiScalar = nl.NkiScalar  # nki.isa.NkiScalar: the values nl.fori_loop passes its body

_V2_V3 = {"trn1", "inf2", "gen2", "trn2", "gen3"}  # NEURON_PLATFORM_TARGET_OVERRIDE values


def _root(t):
    while isinstance(getattr(t, "base", None), nl.Tensor):
        t = t.base
    return t


def _written_by(t, what):
    if getattr(t, "buffer", None) == nl.psum:
        _root(t).written_by = what


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
    _written_by(dst, "tensor_copy")


def memset(dst, value, engine=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "memset")
    dst[...] = value
    _written_by(dst, "memset")


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
    """dst (PSUM) = or += stationary.T @ moving (both SBUF); K on the partitions, stationary free <= 128,
    moving free <= 512. Overwrite or accumulate as the module docstring says."""
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
    if os.environ.get("STANDIN_NKI_WRONG") == "1":  # a miscompiled kernel: 10 % off, every matmul
        product *= 1.1
    before = getattr(_root(dst), "written_by", None)
    add = before is not None if accumulate is None else bool(accumulate)
    if add and before is None:
        raise ValueError("nisa.nc_matmul: accumulate=True onto a PSUM location no matmul has written is undefined")
    target = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    if add and before != "nc_matmul" and target in _V2_V3:
        raise ValueError(
            f"nisa.nc_matmul: accumulating into PSUM initialized by {before} is undefined behaviour on "
            f"NeuronCore-v2/v3 ({target}): let the first matmul overwrite (accumulate=False or None)"
        )
    dst[...] = np.asarray(dst, np.float32) + product if add else product
    _written_by(dst, "nc_matmul")


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "activation")
    x = np.asarray(data, np.float32) * scale + (0.0 if bias is None else np.asarray(bias, np.float32))
    dst[...] = op(x).astype(dst.dtype)
    _written_by(dst, "activation")


def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    _where(dst, (nl.sbuf, nl.psum), "tensor_tensor")
    dst[...] = op(np.asarray(data1, np.float32), np.asarray(data2, np.float32)).astype(dst.dtype)
    _written_by(dst, "tensor_tensor")
