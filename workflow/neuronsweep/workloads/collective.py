"""Collective workload: one collective operation of `bytes` among `world` ranks (the collectives suite).

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md there), so numbers compare with theirs:
  size   all_reduce, all_to_all: each rank's buffer; all_gather: the gathered (output) buffer;
         reduce_scatter: the input buffer. Rounded down to a whole number of elements per rank.
  algbw  size / time
  busbw  algbw x 2(n-1)/n (all_reduce), x (n-1)/n (all_gather, reduce_scatter, all_to_all): the
         bandwidth each link must carry, comparable across world sizes and with the hardware's.
A collective moves data; it does no work a roofline measures, so it has no FLOPs (extract says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuronsweep.store.specs import CollectiveSpec
from neuronsweep.workloads.descriptor import Workload
from neuronsweep.workloads.dtypes import DTYPE_BYTES

DESCRIPTOR = Workload("collective", ranks=True, bandwidth=True)  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}
ROOFLINE = False  # no FLOPs, bytes or GEMMs to model (workloads.has_roofline): algbw and busbw instead


def elements(nbytes: int, world: int, dtype_bytes: int) -> int:
    """Elements of the size buffer: a whole number per rank (nccl-tests rounds the same way)."""
    return nbytes // dtype_bytes // world * world


@dataclass(frozen=True)
class Op:
    """A collective's spec read once (plan.json's): the operation, its size in bytes (nccl-tests' convention),
    its ranks and its dtype."""

    op: str
    nbytes: int
    world: int
    dtype: str

    @classmethod
    def of(cls, s: CollectiveSpec) -> Op:
        """The record of a collective's spec."""
        return cls(s["op"], s["bytes"], s["world"], s["dtype"])

    @property
    def busbw_factor(self) -> float:
        """nccl-tests' factor from algbw to busbw for this op and world."""
        return BUSBW_FACTOR[self.op](self.world)

    @property
    def counts(self) -> tuple[int, int]:
        """(input, output) elements per rank."""
        size, n = self.nbytes // DTYPE_BYTES[self.dtype], self.world
        return {
            "all_reduce": (size, size),
            "all_gather": (size // n, size),
            "reduce_scatter": (size, size // n),
            "all_to_all": (size, size),
        }[self.op]

    def bandwidths(self, time_s: float | None) -> dict[str, float | None]:
        """algbw and busbw (bytes/s) for one time, nccl-tests' definitions."""
        if not time_s:
            return {"algbw_bytes_per_s": None, "busbw_bytes_per_s": None}
        algbw = self.nbytes / time_s
        return {"algbw_bytes_per_s": algbw, "busbw_bytes_per_s": algbw * self.busbw_factor}

    def rank_input(self, rank: int) -> np.ndarray:
        """The input the correctness call gives `rank`: small whole numbers, distinct per rank and element,
        so every sum a collective makes is exact in fp32, bf16 and fp16 alike (the timed calls keep ones)."""
        import numpy as np

        return (np.arange(self.counts[0]) % 7 + rank + 1).astype(np.float64)

    def rank_reference(self, rank: int) -> np.ndarray:
        """What `rank` must hold after the collective of every rank's rank_input (torch.distributed's
        semantics: all_to_all_single sends chunk j of each input to rank j)."""
        import numpy as np

        world, (_, n_out) = self.world, self.counts
        inputs = [self.rank_input(r) for r in range(world)]
        total = np.sum(inputs, axis=0)
        return {
            "all_reduce": lambda: total,
            "all_gather": lambda: np.concatenate(inputs),
            "reduce_scatter": lambda: total[rank * n_out : (rank + 1) * n_out],
            "all_to_all": lambda: np.concatenate([np.array_split(x, world)[rank] for x in inputs]),
        }[self.op]()


RECORD = Op  # what the package's functions hand this module's (workloads/__init__.py)


def spec(op: str, nbytes: int, world: int, dtype: str) -> CollectiveSpec:
    """A collective's spec: the op, its size rounded down to whole elements per rank, the world and the dtype."""
    count = elements(nbytes, world, DTYPE_BYTES[dtype])
    return {"kind": "collective", "op": op, "bytes": count * DTYPE_BYTES[dtype], "world": int(world), "dtype": dtype}


def workload_id(c: Op) -> str:
    """coll-<op>-w<world>-<bytes>b-<dtype>."""
    return f"coll-{c.op.replace('_', '')}-w{c.world}-{c.nbytes}b-{c.dtype}"


def rank_buffer_bytes(c: Op) -> int:
    """A rank's input and output buffers, at most the whole size each."""
    return 2 * c.nbytes


def tensor_shapes(c: Op) -> dict[str, tuple[int, ...]]:
    """Every rank's input and output together: all ranks run on the machine that captures them."""
    inp, out = c.counts
    return {"input": (c.world * inp,), "output": (c.world * out,)}
