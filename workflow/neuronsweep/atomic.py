"""Atomic file writes: a stage's outputs appear whole or not at all (temp file in the same directory, then rename)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (a stale lock or marker names a dead one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(folder: Path, prefix: str) -> None:
    """Remove temp files and folders `<prefix><pid>.*.tmp*` left in `folder` by writers that died (a
    SIGKILL or a power cut skips every cleanup); a live writer's are left alone."""
    for stale in folder.glob(f"{glob.escape(prefix)}*.tmp*"):
        pid = stale.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once: os.umask can only be read by setting it


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; on success rename it over `path`, on error remove it. A writer
    that left the file empty failed without saying so (a 0-byte trace once passed unnoticed): refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, f".{path.stem}.")
    # the writer's pid in the name (for remove_stale); the real suffix last: some writers (torch.export.save) check it
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.{os.getpid()}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp makes it 0600: results on a shared file system are for the team
    os.close(fd)
    try:
        yield Path(tmp)
        if os.path.getsize(tmp) == 0:
            raise UserError(f"{path}: its writer left it empty; nothing was kept (see the stage's log).")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: object) -> None:
    """`obj` as indented JSON at `path`, replaced whole: a reader never sees half a file."""
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def copy_file(src: str | Path, dst: str | Path) -> None:
    """`src` copied to `dst`, replaced whole (see write_json)."""
    with replacing(dst) as tmp:
        shutil.copyfile(src, tmp)


def read_json(path: str | Path) -> Any:
    """The JSON at `path`."""
    return json.loads(Path(path).read_text())
