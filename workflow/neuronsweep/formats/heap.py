"""Hand freed memory back to the operating system after a decode.

A decoder that works a chunk at a time frees its scratch arrays after each chunk, but glibc's
allocator keeps the heap they grew (its mmap threshold rises after the first large frees, so later
arrays come from the heap): a million-slice .pftrace left 150 MB of freed memory in the process,
counted in its RSS while the tables were built next. malloc_trim returns it; elsewhere (musl,
macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def trim() -> None:
    """Give the heap's free pages back (glibc's malloc_trim); a no-op where there is no such call."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
