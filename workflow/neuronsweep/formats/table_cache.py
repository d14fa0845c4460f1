"""Parse once: a profile's tables as Parquet beside it, reused by every later query, extract and report.

A gigabyte legacy JSON or a million-slice .pftrace takes tens of seconds to decode; its tables take
a fraction of a second to read back. The tables of `<dir>/<file>` live in `<dir>/.<file>.tables/`,
published with one rename (never seen half-made, under `<dir>/.<file>.tables.lock`) and reused while
the file's size and modification time match the folder's stamp. Where the folder beside the file cannot
be written (a read-only fixture, someone else's results), the tables are made in the caller's scratch
folder for this use only.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from neuronsweep.atomic import remove_stale

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = 3  # bump when a table's columns or types change: older folders are then made again


def tables_for(source: Path, make: Callable[[Path], None], scratch: Path) -> Path:
    """The folder holding the Parquet tables `make(folder)` writes for `source`, made at most once."""
    folder = source.parent / f".{source.name}.tables"
    st = source.stat()
    stamp = {"format": FORMAT, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if _fresh(folder, stamp):
        return folder
    prefix = f".{source.name}.tables."
    try:
        remove_stale(source.parent, prefix)
        tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.", suffix=".tmp", dir=source.parent))
    except OSError:  # not writable beside the source: this use only
        out = Path(tempfile.mkdtemp(dir=scratch))
        make(out)
        return out
    try:
        make(tmp)
        (tmp / "stamp.json").write_text(json.dumps(stamp))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Published under a lock, the stamp read again: two processes decoding the same profile at once
    # (pytest's workers, two queries) must not remove a fresh folder the other already reads from.
    with _locked(source.parent / f"{prefix}lock"):
        if _fresh(folder, stamp):
            shutil.rmtree(tmp, ignore_errors=True)
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a stale one (the source changed since)
        try:
            os.rename(tmp, folder)
        except OSError:  # the stale one would not go (a file held open on NFS): ours, removed once we are gone
            return tmp
    return folder


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """flock on a lock file opened for writing (NFS emulates flock with a write lock, which a read-only
    descriptor cannot take). A teammate's lock file this user may not open, or a mount without locks
    (ENOLCK): no lock, as before there was one."""
    try:
        handle = open(path, "a")
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def _fresh(folder: Path, stamp: dict[str, int]) -> bool:
    try:
        return bool(json.loads((folder / "stamp.json").read_text()) == stamp)
    except (OSError, ValueError):
        return False


def dictionary_columns(schema: pa.Schema) -> list[str] | bool:
    """The columns a cached table dictionary-encodes: its text (names, opcodes, repeated a million
    times). Ids and timestamps are nearly all distinct, and encoding them cost as much as the rest
    of the write (a million-slice trace's tables: 0.76 s with every column, 0.40 s with text only)."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)] or False
