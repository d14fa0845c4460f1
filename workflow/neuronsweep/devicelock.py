"""An OS file lock around every capture: Snakemake's neuron_device resource only limits one
Snakemake process, and two processes (a sweep plus a single-target rerun) must not share the device."""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path

from .config import schema_default

DEFAULT_LOCK = schema_default("capture.device_lock")


@contextmanager
def held(path: str | Path):
    """Block until the lock is ours; yields a dict that gets the acquired/released times."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    span = {"lock": str(path), "waited_s": None, "acquired_unix": None, "released_unix": None}
    asked = time.time()
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        span["acquired_unix"] = time.time()
        span["waited_s"] = span["acquired_unix"] - asked
        try:
            yield span
        finally:
            span["released_unix"] = time.time()
            fcntl.flock(handle, fcntl.LOCK_UN)
