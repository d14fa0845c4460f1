"""Stand-in NeuronCores (a test double): a process that executes on the device claims its visible cores
(NEURON_RT_VISIBLE_CORES, else every core of the machine) with non-blocking file locks held for its
lifetime, and fails as the real runtime does when another process holds one: a torch-xla process
claims every visible core by default ("Requested:2 Available:0", aws-neuron-sdk #1065). The machine
is STANDIN_DEVICES chips (default 1) of STANDIN_MACHINE (inf2 by default) of STANDIN_CORES_PER_DEVICE cores (default 2);
neuron-ls lists the same."""

import fcntl
import os
import sys
import tempfile
from pathlib import Path

MACHINE = os.environ.get("STANDIN_MACHINE", "inf2")  # what neuron-ls says this is (bin/neuron-ls)
DEVICES = int(os.environ.get("STANDIN_DEVICES", "1"))
# logical NeuronCores per device: 2 on inf2/trn1; 4 on a trn2 at LNC 2 (8 physical)
CORES_PER_DEVICE = int(os.environ.get("STANDIN_CORES_PER_DEVICE", "4" if MACHINE == "trn2" else "2"))
LNC = 2 if MACHINE == "trn2" else 1  # the runtime's LNC: NEURON_LOGICAL_NC_CONFIG must match it
CORES = DEVICES * CORES_PER_DEVICE
_held = []


def process_lnc() -> int:
    """The LNC this process runs at: NEURON_LOGICAL_NC_CONFIG, else the machine's (a trn2 process may run
    at LNC 1 on an LNC 2 machine; its core ids then name physical cores, twice as many)."""
    return int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", LNC))


def count() -> int:
    """NeuronCores this process can name at its LNC."""
    return CORES * LNC // process_lnc()


def visible() -> list[int]:
    spec = os.environ.get("NEURON_RT_VISIBLE_CORES", f"0-{count() - 1}")
    cores = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cores += range(int(lo), int(hi or lo) + 1)
    return cores


def claim() -> None:
    """Hold every visible core until the process exits; exit 1 with the runtime's message if one is taken."""
    root = Path(os.environ.get("STANDIN_CORE_DIR") or Path(tempfile.gettempdir()) / "standin-neuron-cores")
    root.mkdir(parents=True, exist_ok=True)
    cores, lnc = visible(), process_lnc()
    if not cores or max(cores) >= count():
        print(
            f"ERROR NRT:nrt_init Invalid NEURON_RT_VISIBLE_CORES={os.environ.get('NEURON_RT_VISIBLE_CORES')}: "
            f"this instance has NeuronCores 0-{count() - 1} at LNC {lnc}",
            file=sys.stderr,
        )
        sys.exit(1)
    # a lock per physical core: core c at LNC n is physical cores c*n .. c*n+n-1
    for core in [p for c in cores for p in range(c * lnc, c * lnc + lnc)]:
        handle = open(root / f"core{core}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"ERROR NRT:nrt_allocate_neuron_cores Virtual Neuron Core(s) not available - "
                f"Requested:{len(cores)} Available:0 (core {core} is held by another process)",
                file=sys.stderr,
            )
            sys.exit(1)
        _held.append(handle)
