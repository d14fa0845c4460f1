"""One cpu timed round in a fresh interpreter (capture.rounds_in_processes), run by backends/cpu.py:

    python -m neuronsweep.backends.programs.cpu_round BUILD_DIR THREADS WARMUP ITERATIONS
    python -m neuronsweep.backends.programs.cpu_round --screen '[{"spec": ..., "threads": ..., ...}, ...]'
    python -m neuronsweep.backends.programs.cpu_round --alternate '[{"builds": [A, B], "threads": ..., ...}, ...]'

prints {"samples": [...], "pid": N} as its last line (with --alternate, a list per program of each job,
timed in alternation: compare's rounds and a search's finalists, runs/interleave.py). A
fresh interpreter, not a fork: forked rounds kept their parent's level (five rounds within 2 %, the next
capture's 17 % away), because what moves a small case between processes (where the libraries, the heap
and the program land) is drawn when a process starts, and a fork inherits it (Mytkowicz et al.,
"Producing wrong data without doing anything obviously wrong!", ASPLOS 2009).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from neuronsweep.backends import cpu_timing


def main(argv: list[str]) -> int:
    """Run the round(s) asked on the command line and print one line of JSON: the samples (or a screen's results) and
    this process's pid."""
    if argv[0] == "--screen":  # a search's timing-only rung: workloads run eagerly, not built programs
        print(json.dumps({"results": cpu_timing.screen(json.loads(argv[1])), "pid": os.getpid()}))
        return 0
    if argv[0] == "--alternate":  # compare's rounds, a search's finalists: programs timed in alternation
        print(json.dumps({"samples": cpu_timing.time_alternating(json.loads(argv[1])), "pid": os.getpid()}))
        return 0
    build_dir, threads, warmup, iterations = Path(argv[0]), *map(int, argv[1:4])
    samples = cpu_timing.time_round(build_dir, threads, warmup, iterations)
    print(json.dumps({"samples": samples, "pid": os.getpid()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
