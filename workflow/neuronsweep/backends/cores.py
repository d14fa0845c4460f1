"""Which cores a process may use: Neuron's NEURON_RT_VISIBLE_CORES (a slot's cores, named at the LNC a
process runs at, one core per torchrun rank) and the host's CPUs."""

from __future__ import annotations

import os


def core_ids(spec: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES as written (a list or ranges: "0-1,4") -> the core ids."""
    cores: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cores += range(int(lo), int(hi or lo) + 1)
    return cores


def cores_at_lnc(span: str | None, slot_lnc: int, process_lnc: int) -> str | None:
    """A slot's cores (numbered at the machine's LNC, as neuron-ls and the slots count them) named at the
    LNC a process runs at: logical core c of LNC 2 is physical cores 2c and 2c+1 of an LNC 1 process."""
    if span is None or slot_lnc <= process_lnc:  # a process never runs at a coarser LNC than its slot's
        return span
    ratio = slot_lnc // process_lnc
    ids = [p for c in core_ids(span) for p in range(c * ratio, c * ratio + ratio)]
    if ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}" if len(ids) > 1 else str(ids[0])
    return ",".join(map(str, ids))


def own_core() -> None:
    """In a rank under torchrun: narrow NEURON_RT_VISIBLE_CORES (a list or ranges, the slot the parent
    holds) to its LOCAL_RANK-th core. Before the runtime starts, which reads it once; left alone, every
    rank would claim the whole slot (torch-xla), or core LOCAL_RANK of the machine (TorchNeuron), which
    another slot may hold."""
    spec = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if spec:
        os.environ["NEURON_RT_VISIBLE_CORES"] = str(core_ids(spec)[int(os.environ["LOCAL_RANK"])])


def default_threads() -> int:
    """The CPUs this process may run on (its affinity), as torch counts its default threads."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
