"""What a workload kind can do, declared once by its module (`DESCRIPTOR`), the way a backend's descriptor
(config/backends.py) says what a backend can: code outside workloads/ asks it (`workloads.described(spec)`),
never compares a kind's name. A new kind is a module with its shapes, work and program, and a descriptor."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """A workload kind's capabilities; every flag is False for a kind that declares nothing of it."""

    name: str
    # one process per rank, the collective run among them (`world` ranks): built as a launch plan where the
    # backend compiles no collective, captured by every rank, with a rank spread and busbw in its metrics
    ranks: bool = False
    # a collective alone: its size moves over the links, so algbw and busbw (nccl-tests') and nccom-test's
    # figures stand beside its time (a forward across ranks runs on ranks too, but computes between them)
    bandwidth: bool = False
    # a model's layer (or head) measured whole: its time split by category (metrics' layer split, the window
    # bounds of each category), its build keeping the HLO metadata the split reads
    layer_split: bool = False
    # the user's own function or NKI kernel, loaded from their file: no device loops of ours to check
    user_code: bool = False
    # its program may make tensors of its own (a user's function, a model's layer): exported on real inputs,
    # not on meta tensors, which cannot mix with them
    real_inputs: bool = False
    # its NKI kernel takes tile sizes from the spec (kernels/nki_matmul.tiles)
    nki_tiles: bool = False
