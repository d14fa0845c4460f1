"""OS file locks around every step that uses the device (captures, neuron builds, the cpu
calibration): Snakemake's neuron_device resource only limits one Snakemake process, and two processes
(a sweep plus a single-target rerun) must not share the device. One lock on cpu and xla; on neuron one
lock per NeuronCore, taken a slot at a time (slots.py).

The holder writes who it is into the lock file, so a waiting step says who holds the device and since
when (every WAIT_REPORT_S), and `neuronsweep doctor` shows it. The lock is flock(2): the kernel drops it
when its holder dies, so a lock left by a killed process is simply taken over.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NotRequired, TypedDict

from neuronsweep.config.schema import schema_default
from neuronsweep.errors import UserError

DEFAULT_LOCK = schema_default("capture.device_lock")
WAIT_REPORT_S = 30.0
POLL_S = 0.1
log = logging.getLogger("neuronsweep")


def check_usable(path: str, key: str = "capture.device_lock") -> None:
    """Refuse, before any job, a lock path that would not keep two captures apart (a device file such
    as /dev/null takes the lock but excludes nobody) or that cannot be created."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_file():
        kind = "a folder" if p.is_dir() else "not a regular file"
        raise UserError(
            f"config key '{key}' = {path!r} is {kind}, so a lock there would not keep captures apart; "
            f"point it at a file path such as {DEFAULT_LOCK}."
        )
    try:
        os.close(os.open(p, os.O_RDWR | os.O_CREAT, 0o666))
    except OSError as exc:
        raise UserError(
            f"config key '{key}' = {path!r} cannot be created or opened ({exc.strerror}); point it at "
            f"a writable place such as {DEFAULT_LOCK}."
        ) from None


class Holder(TypedDict):
    """What the process holding a lock wrote in it: who, and since when."""

    pid: int
    holder: str
    since_unix: float


class Span(TypedDict):
    """When the device was held, and by which lock (a capture or build record's `device_span`)."""

    lock: str | list[str]  # the lock, or the slot's locks (a lock per NeuronCore)
    group: NotRequired[int]  # which of the groups asked for was free first (a slot's span names the slot instead)
    acquired_unix: float
    waited_s: float
    slot: NotRequired[int]  # host/slots.held: the device slot, its visible cores and the pool it was one of
    cores: NotRequired[str | None]
    pool: NotRequired[str]
    released_unix: NotRequired[float]  # once released


def _describe(info: Holder | None) -> str:
    if not info:
        return "an unknown process"
    since = time.strftime("%H:%M:%S", time.localtime(info["since_unix"]))
    return f"pid {info['pid']} ({info['holder']}) since {since}, {time.time() - info['since_unix']:.0f} s ago"


def _read(handle: IO[str]) -> Holder | None:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "null")
    except json.JSONDecodeError:
        return None


def holder(path: str | Path) -> str:
    """'free', or who holds the lock and since when (for doctor)."""
    path = Path(path)
    if not path.exists():
        return "free"
    with open(path, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"held by {_describe(_read(handle))}"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return "free"


@contextmanager
def held(path: str | Path, who: str = "a neuronsweep step") -> Iterator[Span]:
    """Wait until the lock is ours (saying who holds it meanwhile); yields a dict that gets the
    acquired/released times."""
    with held_any([[Path(path)]], who) as span:
        yield span


def _try_group(handles: list) -> bool:
    """Take every lock of one group, or none: a group is one device slot (a lock per NeuronCore)."""
    taken: list = []
    for handle in handles:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            for other in taken:
                fcntl.flock(other, fcntl.LOCK_UN)
            return False
        taken.append(handle)
    return True


@contextmanager
def held_any(groups: list[list[Path]], who: str = "a neuronsweep step") -> Iterator[Span]:
    """Wait until every lock of one of the groups is ours (the first free group, in order), saying who
    holds them meanwhile; yields a dict with the group's index, its locks and the acquired/released
    times. Polled every POLL_S: a slot freed is taken within that, which bench/parallel_capture.py
    measures."""
    for group in groups:
        for path in group:
            path.parent.mkdir(parents=True, exist_ok=True)
    asked = time.time()
    handles = [[open(path, "a+") for path in group] for group in groups]
    try:
        said, chosen = None, None
        while chosen is None:
            chosen = next((i for i, group in enumerate(handles) if _try_group(group)), None)
            if chosen is None:
                if said is None or time.time() - said >= WAIT_REPORT_S:
                    first = groups[0][0] if len(groups) == 1 else f"{len(groups)} device slots"
                    holders = "; ".join(_describe(_read(group[0])) for group in handles[:3])
                    log.warning(
                        f"waiting for the device lock {first}: held by {holders}" + (" ..." if len(handles) > 3 else "")
                    )
                    said = time.time()
                time.sleep(POLL_S)
        mine = handles[chosen]
        acquired = time.time()
        span: Span = {
            "lock": str(groups[chosen][0]) if len(groups[chosen]) == 1 else [str(p) for p in groups[chosen]],
            "group": chosen,
            "acquired_unix": acquired,
            "waited_s": acquired - asked,
        }
        for handle in mine:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "holder": who, "since_unix": span["acquired_unix"]}))
            handle.flush()
        try:
            yield span
        finally:
            span["released_unix"] = time.time()
            for handle in mine:
                handle.seek(0)
                handle.truncate()
                handle.flush()
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        for opened in handles:
            for handle in opened:
                handle.close()
