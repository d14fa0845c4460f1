"""nki.language double (standalone nki >= 0.2): tensors are numpy arrays that know their memory
(HBM, SBUF, PSUM), so nki.isa can enforce where each instruction may read and write. Uninitialized
on-chip memory is NaN, so a kernel that accumulates into PSUM it never cleared fails its check.
Block dimensions (nl.par_dim) were removed from the language, so this double has none."""

import os

import numpy as np

try:
    import ml_dtypes

    bfloat16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes ships with jax and the Neuron stacks
    bfloat16 = np.float32
float32, float16 = np.float32, np.float16

sbuf, psum, shared_hbm, hbm = "sbuf", "psum", "shared_hbm", "hbm"
PARTITIONS = 128
PSUM_PARTITION_BYTES = 16 * 1024  # 2 MiB over 128 partitions on NeuronCore-v2, -v3 and -v4
# SBUF per partition by NEURON_PLATFORM_TARGET_OVERRIDE: 192 KiB (trainium_inferentia2_arch.rst), "128
# partitions of 224KiB" (trainium2_arch.rst), 32 MiB / 128 (trainium3_arch.rst)
SBUF_BY_TARGET = {"trn1": 192, "inf2": 192, "gen2": 192, "trn2": 224, "gen3": 224, "trn3": 256, "gen4": 256}


def sbuf_partition_bytes() -> int:
    """The SBUF of one partition on the target the kernel is built for (trn2 when none is set)."""
    return SBUF_BY_TARGET.get(os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2"), 224) * 1024


class NkiScalar:
    """nki.isa.NkiScalar (its API page, SDK 2.33): one 32-bit integer computed on the device. Arithmetic with an
    int or another scalar is traced and yields a new scalar (wrapping at 32 bits, a register's width);
    comparisons are traced too, and their result "cannot be used" in Python control flow (NKI Loops); it can
    be the scalar_offset of an access pattern or a bound of fori_loop. The stand-in runs the kernel eagerly,
    so it knows the value, but a kernel that reads it as a Python int (a slice bound, an `if`) would not
    trace on the device: refused here."""

    def __init__(self, value: int):
        self._value = int(value)

    def _other(self, x):
        if isinstance(x, NkiScalar):
            return x._value
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            return int(x)
        return NotImplemented

    def _op(self, x, f):
        v = self._other(x)
        if v is NotImplemented:
            return NotImplemented
        return NkiScalar((f(self._value, v) + 2**31) % 2**32 - 2**31)  # a 32-bit register: it wraps

    # comparisons are traced too, and their result is a scalar that cannot steer Python's control flow
    def __lt__(self, x):
        return self._op(x, lambda a, b: int(a < b))

    def __le__(self, x):
        return self._op(x, lambda a, b: int(a <= b))

    def __gt__(self, x):
        return self._op(x, lambda a, b: int(a > b))

    def __ge__(self, x):
        return self._op(x, lambda a, b: int(a >= b))

    def __eq__(self, x):
        return self._op(x, lambda a, b: int(a == b))

    def __ne__(self, x):
        return self._op(x, lambda a, b: int(a != b))

    __hash__ = object.__hash__

    def __add__(self, x):
        return self._op(x, lambda a, b: a + b)

    def __sub__(self, x):
        return self._op(x, lambda a, b: a - b)

    def __mul__(self, x):
        return self._op(x, lambda a, b: a * b)

    __radd__, __rmul__ = __add__, __mul__

    def __rsub__(self, x):
        return self._op(x, lambda a, b: b - a)

    def __neg__(self):
        return NkiScalar(-self._value)

    def _no_python_value(self, *_):
        raise TypeError(
            "an NkiScalar is computed on the device: it has no Python value while the kernel is traced (a "
            "comparison of one is traced, and the result cannot be used in Python control flow); use it as "
            "scalar_offset of an access pattern (tensor.ap) or as a bound of nl.fori_loop"
        )

    __index__ = __int__ = __bool__ = __float__ = _no_python_value


def offset_value(x) -> int:
    """The stand-in's value of a scalar_offset (an NkiScalar or a Python int)."""
    return x._value if isinstance(x, NkiScalar) else int(x)


class Tensor(np.ndarray):
    """A numpy array with the memory it lives in; slices (views) keep it."""

    def __array_finalize__(self, obj):
        self.buffer = getattr(obj, "buffer", hbm)

    def ap(self, pattern, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """NkiTensor.ap (NKI Access Patterns; NkiTensor's API page): `pattern` is [[stride, count], ...] in
        elements, the partition dimension first, from `offset` elements into the tensor. `scalar_offset` (an
        NkiScalar or int) moves the start by that many indices of dimension `indirect_dim`, i.e. times that
        dimension's stride: the pages give no formula, AWS's own kernels state it (aws-neuron/nki-library,
        moe_cte/bwmm_shard_on_I_mx.py: "scalar_offset=block_expert with indirect_dim=0 means access starts
        at block_expert * (p_I * n_total_I512_tile * H)" for a tensor of shape (E, p_I, n_total_I512_tile, H)).
        The stand-in takes it on a contiguous tensor only and refuses an access outside the tensor (a
        DMA's default oob_mode is an error); vector_offset and dtype are not modelled."""
        if vector_offset is not None or dtype is not None:
            raise NotImplementedError("stand-in nki: .ap(vector_offset=, dtype=) is not modelled")
        if not self.flags["C_CONTIGUOUS"]:
            raise ValueError("stand-in nki: .ap on a strided view is not modelled; call it on the whole tensor")
        if not 0 <= indirect_dim < self.ndim:
            raise ValueError(f"nki: indirect_dim {indirect_dim} of a {self.ndim}-d tensor")
        strides = [int(np.prod(self.shape[d + 1 :], dtype=np.int64)) for d in range(self.ndim)]
        start = int(offset) + (0 if scalar_offset is None else offset_value(scalar_offset) * strides[indirect_dim])
        counts = [int(c) for _, c in pattern]
        steps = [int(s) for s, _ in pattern]
        last = start + sum(s * (c - 1) for s, c in zip(steps, counts))
        if start < 0 or last >= self.size:
            raise IndexError(
                f"nki: access pattern {pattern} from element {start} reaches element {last} of a tensor of "
                f"{self.size} elements (shape {self.shape})"
            )
        flat = self.reshape(-1)
        view = np.lib.stride_tricks.as_strided(
            flat[start:], shape=counts, strides=[s * self.itemsize for s in steps], writeable=True
        )
        return tensor(view, self.buffer)


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
        limit = PSUM_PARTITION_BYTES if buffer == psum else sbuf_partition_bytes()
        if free > limit:
            raise ValueError(f"nl.ndarray: {free} bytes per partition exceed the {buffer} size {limit}")
        data = np.full(shape, np.nan, dtype=np.float32).astype(dtype)
        out = tensor(data, buffer)
        if _BODY:  # allocated in a device loop's body: live on chip until nothing refers to it
            _BODY[-1].allocated(out, buffer, free)
        return out
    return tensor(np.zeros(shape, dtype=dtype), buffer)


class _Body:
    """What one body of nl.fori_loop keeps on chip, per partition. The NKI Dynamic Loops page ("Register
    Allocation Implications"): the compiler "must keep all live tensors in on-chip memory (SBUF/PSUM) for the
    entire duration of the loop"; "tensors allocated inside the loop body are allocated once and reused across
    iterations". When a tile stops being live the page does not say (at its last use, or never); the stand-in
    is strict where the docs are silent: a tile is live from its allocation until the kernel no longer refers
    to it (the next tile bound to its name, or the body's end), an upper bound of any last-use liveness. The
    peak of each buffer over the body's first iteration (every iteration runs the same body) must fit in a
    partition, else the build fails as an allocation would."""

    def __init__(self):
        self.live = {sbuf: 0, psum: 0}
        self.peak = {sbuf: 0, psum: 0}

    def allocated(self, t, buffer: str, nbytes: int) -> None:
        import weakref

        self.live[buffer] += nbytes
        self.peak[buffer] = max(self.peak[buffer], self.live[buffer])
        weakref.finalize(t, self._freed, buffer, nbytes)

    def _freed(self, buffer: str, nbytes: int) -> None:
        self.live[buffer] -= nbytes

    def nested(self, inner: "_Body") -> None:
        """An inner loop's peak on top of what this body holds while it runs."""
        for buffer in (sbuf, psum):
            self.peak[buffer] = max(self.peak[buffer], self.live[buffer] + inner.peak[buffer])

    def check(self) -> None:
        for buffer, limit in ((sbuf, sbuf_partition_bytes()), (psum, PSUM_PARTITION_BYTES)):
            if self.peak[buffer] > limit:
                raise RuntimeError(
                    f"nl.fori_loop: the loop body keeps {self.peak[buffer]} bytes of {buffer.upper()} live per "
                    f"partition at once, over the {limit} a partition holds on "
                    f"{os.environ.get('NEURON_PLATFORM_TARGET_OVERRIDE', 'trn2')}: every tensor live in the body "
                    "stays on chip for the whole loop (NKI Dynamic Loops); keep fewer tiles live"
                )


_BODY: list = []  # the device loop bodies being traced, innermost last
DEVICE_LOOP_BYTES = []  # {"sbuf", "psum"}: each nl.fori_loop body's peak live bytes per partition (for tests)


DEPRECATED_CALLS = []  # the deprecated range iterators a kernel called while traced (NKI 0.6+)
DEVICE_LOOPS = []  # [lower, upper, step] of each nl.fori_loop a kernel ran (kept in its NEFF, for tests)


def _version() -> tuple:
    import importlib.metadata
    import re

    try:
        return tuple(int(x) for x in re.findall(r"\d+", importlib.metadata.version("nki"))[:3])
    except importlib.metadata.PackageNotFoundError:
        return (0, 5, 0)


def _range(name):
    """affine_range, sequential_range and static_range: deprecated from NKI 0.6 (the API reference of SDK
    2.32, beside the new nl.fori_loop), and from 0.7 they default to Python range ("NKI Loops"); before
    they are the loop iterators. Either way the double runs them as range; from 0.6 it warns as the
    package does and the NEFF records the call (nki/__init__.py)."""

    def iterate(start, stop=None, step=1):
        if _version() >= (0, 6):
            import warnings

            DEPRECATED_CALLS.append(f"nl.{name}")
            now = "defaults to Python range" if _version() >= (0, 7) else "use nl.fori_loop for a device loop"
            warnings.warn(f"nl.{name} is deprecated: {now}", DeprecationWarning, stacklevel=2)
        return range(start) if stop is None else range(start, stop, step)

    return iterate


affine_range, sequential_range, static_range = (_range(n) for n in ("affine_range", "sequential_range", "static_range"))


def fori_loop(lower, upper, body_fun, step=1):
    """nl.fori_loop (its API page, SDK 2.33; "NKI Loops"): the compiled loop, body_fun(i) for i from lower
    to upper (exclusive), i an NkiScalar passed by value; step a compile-time positive int; a 32-bit bound.
    It arrived in NKI 0.6.0 (the NKI release notes of SDK 2.32.0: "fori_loop() and while_loop() are now
    available"); before 0.6 there is none ("Earlier versions of NKI used range iterators instead of loop
    constructs", NKI Loops). The stand-in runs the body once per iteration."""
    if _version() < (0, 6):
        raise AttributeError("module 'nki.language' has no attribute 'fori_loop' (NKI 0.6+)")
    if os.environ.get("NKI_COMPILER_FRONTEND") == "custom":  # deprecated in 2.33 (nki.jit, 2.33.1)
        raise RuntimeError("nl.fori_loop: its NkiScalar needs the tracer frontend, not NKI_COMPILER_FRONTEND=custom")
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise AssertionError(f"nl.fori_loop: step must be a compile-time positive integer, got {step!r}")
    lo, hi = offset_value(lower), offset_value(upper)
    if not all(-(2**31) <= b < 2**31 for b in (lo, hi)):
        raise ValueError("nl.fori_loop: a bound must be 32-bit")
    DEVICE_LOOPS.append([lo, hi, step])
    for n, i in enumerate(range(lo, hi, step)):
        if n:
            body_fun(NkiScalar(i))
            continue
        body = _Body()  # the first iteration: what the one body allocates and keeps live
        _BODY.append(body)
        try:
            body_fun(NkiScalar(i))
        finally:
            _BODY.pop()
        if _BODY:
            _BODY[-1].nested(body)
        DEVICE_LOOP_BYTES.append(dict(body.peak))
        body.check()


def silu(x):
    return x / (1 + np.exp(-x))


multiply, add = np.multiply, np.add
