"""What every stage record carries, so a user can see when, how long and with which exact command."""

from __future__ import annotations

import shlex
import sys
import time

from . import __version__


def stage_record(stage: str, started: float, **fields) -> dict:
    return {
        "stage": stage,
        **fields,
        "wall_s": time.time() - started,
        "started_unix": started,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "command": shlex.join(["neuronsweep", *sys.argv[1:]]),
        "neuronsweep_version": __version__,
    }
