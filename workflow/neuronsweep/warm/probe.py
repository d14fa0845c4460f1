"""The host probe (host/caps.py) measured by the warm server before its imports: a cold probe is a child that
imports torch (about 3 s) only to time a GEMM, and the server imports torch for the builds anyway. Its
imports are timed in the server (the first it makes), its GEMMs in a forked child: torch's thread pool must
not start in a process that forks every job."""

from __future__ import annotations

import json
import os

from neuronsweep.host import caps


def measure(threads: int, fd: int) -> None:
    """The host probe, written to fd as JSON: its imports timed here (the first this process makes), its
    GEMMs in a forked child (torch's thread pool must not start in a process that forks every job)."""
    with os.fdopen(fd, "w") as out:
        imports = caps.timed_imports()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_end)
                with os.fdopen(write_end, "w") as rates:
                    json.dump(caps.gemm_rates(threads), rates)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end) as rates:
            text = rates.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            json.dump({**imports, **json.loads(text)}, out)
