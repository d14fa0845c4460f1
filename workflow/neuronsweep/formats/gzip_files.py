"""A profile or trace file read whether or not it is gzip-compressed (told by its first bytes, not its name),
and a damaged gzip file as one sentence: what every reader of formats/ opens its files through."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from io import BufferedReader
from pathlib import Path

from neuronsweep.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


@contextmanager
def gzip_damage(path: Path) -> Iterator[None]:
    """A damaged gzip file (truncated, corrupt) as one sentence instead of zlib's traceback."""
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        what = "it ends early: truncated" if isinstance(exc, EOFError) else f"corrupt: {exc}"
        raise UserError(
            f"{path}: a damaged gzip file ({what}); compress the trace again from its original, or pass it "
            "uncompressed."
        ) from None


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes (profiles are saved either way)."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_bytes(path: Path) -> gzip.GzipFile | BufferedReader:
    """The file's bytes, decompressed when it is gzip (told by its first bytes, not its name)."""
    handle = open(path, "rb")
    if handle.read(2) == GZIP_MAGIC:
        handle.close()
        return gzip.open(path, "rb")
    handle.seek(0)
    return handle


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip."""
    with open_bytes(path) as handle:
        return handle.read()
