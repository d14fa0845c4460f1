"""nki.language double (standalone nki >= 0.2): tensors are numpy arrays that know their memory
(HBM, SBUF, PSUM), so nki.isa can enforce where each instruction may read and write. Uninitialized
on-chip memory is NaN, so a kernel that accumulates into PSUM it never cleared fails its check.
Block dimensions (nl.par_dim) were removed from the language, so this double has none."""

import numpy as np

try:
    import ml_dtypes

    bfloat16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes ships with jax and the Neuron stacks
    bfloat16 = np.float32
float32, float16 = np.float32, np.float16

sbuf, psum, shared_hbm, hbm = "sbuf", "psum", "shared_hbm", "hbm"
PARTITIONS = 128
PSUM_PARTITION_BYTES = 16 * 1024  # 2 MiB over 128 partitions
SBUF_PARTITION_BYTES = 192 * 1024  # 24 MiB over 128 partitions (NeuronCore-v2)


class Tensor(np.ndarray):
    """A numpy array with the memory it lives in; slices (views) keep it."""

    def __array_finalize__(self, obj):
        self.buffer = getattr(obj, "buffer", hbm)


def tensor(array, buffer):
    t = np.asarray(array).view(Tensor)
    t.buffer = buffer
    return t


def ndarray(shape, dtype, buffer=sbuf, name=None):
    shape = tuple(int(s) for s in shape)
    if buffer not in (sbuf, psum, shared_hbm, hbm):
        raise TypeError(f"nl.ndarray: unknown buffer {buffer!r}")
    if buffer in (sbuf, psum):
        if shape[0] > PARTITIONS:
            raise ValueError(f"nl.ndarray: partition dimension {shape[0]} exceeds {PARTITIONS} ({buffer})")
        free = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        limit = PSUM_PARTITION_BYTES if buffer == psum else SBUF_PARTITION_BYTES
        if free > limit:
            raise ValueError(f"nl.ndarray: {free} bytes per partition exceed the {buffer} size {limit}")
        data = np.full(shape, np.nan, dtype=np.float32).astype(dtype)
    else:
        data = np.zeros(shape, dtype=dtype)
    return tensor(data, buffer)


def affine_range(n):
    return range(n)


sequential_range = static_range = affine_range


def silu(x):
    return x / (1 + np.exp(-x))


multiply, add = np.multiply, np.add
