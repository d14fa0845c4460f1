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


DEPRECATED_CALLS = []  # the deprecated range iterators a kernel called while traced (NKI 0.7+)


def _version() -> tuple:
    import importlib.metadata
    import re

    try:
        return tuple(int(x) for x in re.findall(r"\d+", importlib.metadata.version("nki"))[:3])
    except importlib.metadata.PackageNotFoundError:
        return (0, 5, 0)


def _range(name):
    """NKI 0.7 ("NKI Loops"): affine_range, sequential_range and static_range are deprecated and default to
    Python range; before 0.7 they are the loop iterators. Either way the double runs them as range; under
    0.7 it warns as the package does and the NEFF records the call (nki/__init__.py)."""

    def iterate(start, stop=None, step=1):
        if _version() >= (0, 7):
            import warnings

            DEPRECATED_CALLS.append(f"nl.{name}")
            warnings.warn(
                f"nl.{name} is deprecated in NKI 0.7 and defaults to Python range", DeprecationWarning, stacklevel=2
            )
        return range(start) if stop is None else range(start, stop, step)

    return iterate


affine_range, sequential_range, static_range = (_range(n) for n in ("affine_range", "sequential_range", "static_range"))


def silu(x):
    return x / (1 + np.exp(-x))


multiply, add = np.multiply, np.add
