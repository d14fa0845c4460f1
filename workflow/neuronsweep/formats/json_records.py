"""The records of a JSON document's top-level arrays, found in byte blocks without decoding them.

A legacy profile is one object of arrays of flat records, gigabytes of them. Decoding it value by
value in Python (ijson) costs about 1 us per value; this module only finds where each record
starts and ends, with numpy over 16 MiB blocks: structural bytes ({ } [ ]) outside strings (a
quote is a string's edge unless escaped) and their nesting depth. Records of one array come out as
newline-delimited JSON batches, a block's worth at a time, for a C++ parser (pyarrow.json).

It assumes what a JSON writer makes of an array of objects: items are objects, separated by one
comma and optional whitespace. Where an array holds anything else (a scalar or a list as an item,
a key too long to find) it says so (`Split.irregular`) and the caller reads that array another way;
nothing is guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from neuronsweep.formats.gzip_files import open_bytes

BLOCK = 16 << 20
MAX_DEPTH = 512  # deeper nesting is refused: pyarrow's JSON parser crashes (SIGSEGV) near 10^4 levels
KEY_WINDOW = 4096  # bytes before an array's `[` searched for its key
KEY = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
WHITESPACE = b" \t\r\n"
NEWLINES_TO_SPACES = bytes.maketrans(b"\r\n", b"  ")
NOT_OPEN_OR_NEWLINE = bytes(c for c in range(256) if c not in b"{[\n")  # deleted by _shallow
LONG_INT = re.compile(rb"[0-9]{20}")
LBRACE, RBRACE, LBRACKET, RBRACKET, QUOTE, BACKSLASH, COMMA, NEWLINE = b'{}[]"\\,\n'


def first_byte(path: Path) -> bytes:
    """The document's first byte that is not whitespace (b"" for an empty or blank file)."""
    with open_bytes(path) as handle:
        while block := handle.read(1 << 16):
            stripped = block.lstrip(WHITESPACE)
            if stripped:
                return stripped[:1]
    return b""


class NotJSON(ValueError):
    """The bytes are not (all of) a JSON document."""


def _escaped(backslashes: np.ndarray, escape_first: bool, size: int) -> tuple[np.ndarray, bool]:
    """The positions a backslash escapes (JSON has backslashes only inside strings, and profiles
    have few), and whether the block's last byte escapes the next block's first."""
    out, last = ([0], 0) if escape_first else ([], -1)
    for p in backslashes.tolist():
        if p != last:  # this backslash is not itself escaped: it escapes the next byte
            last = p + 1
            out.append(last)
    return np.asarray(out, np.int64), bool(out) and out[-1] == size


_BYTE_PARITY = np.array([bin(b).count("1") & 1 for b in range(256)], np.uint8)
# [byte, k]: the parity of its bits 0..k (bit k is the k-th byte of the eight it packs, little-endian)
_PREFIX_PARITY = np.array([[bin(b & ((2 << k) - 1)).count("1") & 1 for k in range(8)] for b in range(256)], np.uint8)


def _quote_parity(quote: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, int]:
    """How many quotes there are up to each of `pos`, odd or even (1: inside a string), and the block's
    own parity. The quotes packed eight to a byte, so the running parity runs over an eighth of the
    bytes (a running XOR over every byte was the block's slowest step)."""
    bits = np.packbits(quote, bitorder="little")
    carry = np.bitwise_xor.accumulate(_BYTE_PARITY[bits])  # through each packed byte
    byte, bit = pos >> 3, pos & 7
    before = np.where(byte > 0, carry[np.maximum(byte - 1, 0)], 0) if bits.size else np.zeros(pos.size, np.uint8)
    inside = before ^ _PREFIX_PARITY[bits[byte], bit] if pos.size else np.zeros(0, np.uint8)
    return inside, int(carry[-1]) if carry.size else 0


class _Structure:
    """The structural bytes ({ } [ ]) of a document outside its strings, a block at a time, with the
    nesting depth after each; what a block leaves open (a string, an escape, the depth) carries over.
    Scratch arrays are reused: a fresh 16 MiB array per step costs more in page faults than the step."""

    def __init__(self) -> None:
        self.depth, self.in_string, self.escape_next = 0, 0, False
        self.scratch = [np.empty(BLOCK, np.uint8) for _ in range(3)]

    def block(self, buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n = len(buf)
        if n > BLOCK:
            self.scratch = [np.empty(n, np.uint8) for _ in range(3)]
        a = np.frombuffer(buf, np.uint8)
        quote, folded, hit = (x[:n] for x in self.scratch)
        np.equal(a, QUOTE, out=quote.view(bool))
        if self.escape_next or buf.find(b"\\") >= 0:
            escaped, self.escape_next = _escaped(np.flatnonzero(a == BACKSLASH), self.escape_next, n)
            quote[escaped[escaped < n]] = 0
        # `{`|0x20 and `[`|0x20 are both `{`; `}` and `]` both `}`
        np.bitwise_or(a, 0x20, out=folded)
        np.equal(folded, LBRACE, out=hit.view(bool))
        pos = np.flatnonzero(np.logical_or(hit.view(bool), np.equal(folded, RBRACE), out=hit.view(bool)))
        inside, total = _quote_parity(quote.view(bool), pos)  # 1 inside a string (from its opening quote)
        pos = pos[(inside ^ self.in_string) == 0]
        self.in_string ^= total
        chars = a[pos]
        opens = (chars == LBRACE) | (chars == LBRACKET)
        after = self.depth + np.cumsum(np.where(opens, 1, -1))  # the depth after each structural byte
        if after.size:
            if after.min() < 0:
                raise NotJSON("not JSON (a bracket closes what was never opened)")
            if after.max() > MAX_DEPTH:  # the C parsers behind (pyarrow's) recurse: a deep file would crash them
                raise NotJSON(f"values nest deeper than {MAX_DEPTH} levels; no profiler writes that")
            self.depth = int(after[-1])
        return pos, chars, opens, after


class _Array:
    """One wanted top-level array being split: the bytes of a record cut by the block's end, and the
    bytes after the last record (which must be a comma and whitespace)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.pending = b""  # an unfinished record's first bytes
        self.gap = b""  # bytes since the last record's end (or the array's `[`)
        self.records = 0
        self.first = b""  # the first record's bytes


@dataclass
class Split:
    """One pass over a document's top-level arrays named in `keys`: iterating it yields (key, ndjson bytes,
    record count) batches of their records, and it keeps what the pass found (a key is in `irregular` before a
    batch of its that may hold anything but records is yielded). Of the `first_of` arrays only the first
    record is kept."""

    path: Path
    keys: set[str]
    first_of: set[str] = field(default_factory=set)
    records: dict[str, int] = field(default_factory=dict)  # per key, how many records
    irregular: set[str] = field(default_factory=set)  # keys whose arrays were not plain records
    repeated: set[str] = field(default_factory=set)  # keys whose array appears twice (a JSON reader keeps the last)
    first: dict[str, bytes] = field(default_factory=dict)  # the first record's bytes of each `first_of` key

    def __post_init__(self) -> None:
        self._current: _Array | None = None  # the wanted array being read
        self._first: _Array | None = None  # a first_of array whose first record is still being read

    def __iter__(self) -> Iterator[tuple[str, bytes | bytearray, int]]:
        scan = _Structure()
        head = b""  # the previous block's last bytes, to find a key cut by the block's edge
        with open_bytes(self.path) as handle:
            while buf := handle.read(BLOCK):
                yield from self._block(scan, buf, head)
                head = buf[-KEY_WINDOW:] if len(buf) >= KEY_WINDOW else (head + buf)[-KEY_WINDOW:]
        if scan.depth or scan.in_string:
            raise NotJSON(f"the JSON ends inside {'a string' if scan.in_string else 'an object or array'}: cut short")

    def _block(self, scan: _Structure, buf: bytes, head: bytes) -> Iterator[tuple[str, bytes | bytearray, int]]:
        """One block's regions between the edges of top-level values: their records, then what the edge is."""
        pos, chars, opens, after = scan.block(buf)
        # where a top-level value opens (depth 1 -> 2) or closes (2 -> 1)
        edges = np.flatnonzero((opens & (after == 2)) | (~opens & (after == 1))).tolist()
        start = 0
        for e in [*edges, None]:
            stop = len(buf) if e is None else int(pos[e])
            lo, hi = np.searchsorted(pos, [start, stop])
            region = (buf, start, stop, pos[lo:hi], chars[lo:hi], after[lo:hi])
            if self._current is not None and (batch := _records(self._current, *region, self)):
                yield self._current.key, *batch
            if self._first is not None and _records(self._first, *region, self):
                self.first[self._first.key] = self._first.first
                self._first = None
            if e is None:
                return
            if opens[e]:
                self._opened(buf, stop, head, chars[e])
            else:
                self._closed()
            start = stop + 1

    def _opened(self, buf: bytes, stop: int, head: bytes, char: int) -> None:
        """A top-level value starts at buf[stop]: which key's, and whether it is wanted."""
        window = buf[max(0, stop - KEY_WINDOW) : stop]
        found = KEY.search(head + window if stop < KEY_WINDOW else window)
        key = found.group(1).decode("utf-8", "replace") if found else None
        if char != LBRACKET:
            return
        if key in self.keys:
            if key in self.records:
                self.repeated.add(key)
            self._current = _Array(key)
        elif key in self.first_of and key not in self.first:
            self._first = _Array(key)
        elif found is None:  # cannot tell which array this is
            self.irregular.update((self.keys | self.first_of) - set(self.records) - set(self.first))

    def _closed(self) -> None:
        """A top-level value ends: after its last record, only whitespace."""
        for arr in (self._current, self._first):
            if arr is not None and arr.gap.strip(WHITESPACE):
                self.irregular.add(arr.key)
        if self._current is not None:
            self.records[self._current.key] = self.records.get(self._current.key, 0) + self._current.records
        self._current = self._first = None


def split(path: Path, keys: set[str], first_of: set[str] | None = None) -> Split:
    """A pass over `path`'s top-level arrays named in `keys` (and the first record of those in `first_of`):
    iterate it for the batches, then read what it found from it."""
    return Split(path, set(keys), set(first_of or ()))


def _records(
    arr: _Array, buf: bytes, start: int, stop: int, pos: np.ndarray, chars: np.ndarray, after: np.ndarray, result: Split
) -> tuple[bytes | bytearray, int] | None:
    """The records of `arr` that end within buf[start:stop], as (ndjson bytes, count), or None; keeps
    what is left (an unfinished record, or the bytes after the last one) for the next region."""
    if ((chars == LBRACKET) & (after == 3)).any():  # a list as an item
        result.irregular.add(arr.key)
    begins = pos[(chars == LBRACE) & (after == 3)]
    ends = pos[(chars == RBRACE) & (after == 2)]
    pending = bool(arr.pending)
    if not pending and begins.size:  # the gap before this region's first record
        _check_gap(arr, arr.gap + buf[start : int(begins[0])], result)
    if not ends.size:
        if pending:
            arr.pending += buf[start:stop]
        elif begins.size:
            arr.pending, arr.gap = buf[int(begins[0]) : stop], b""
        else:
            arr.gap += buf[start:stop]
            if len(arr.gap) > KEY_WINDOW and arr.gap.strip(WHITESPACE):  # values, not records
                result.irregular.add(arr.key)
                arr.gap = b""  # read another way: no need to hold them
        return None
    # record i ends at ends[i]; the next begins at begins[i] (after a pending record) or begins[i + 1]
    nxt = begins if pending else begins[1:]
    prev = ends[: nxt.size]
    for i in np.flatnonzero(nxt - prev != 2).tolist():  # anything but `},{`: a comma and whitespace?
        if buf[int(prev[i]) + 1 : int(nxt[i])].strip(WHITESPACE) != b",":
            result.irregular.add(arr.key)
    cut = int(ends[-1]) + 1
    body_from = start if pending else int(begins[0])
    batch = bytearray(arr.pending)
    batch += memoryview(buf)[body_from:cut]
    if b"\n" in batch or b"\r" in batch:  # a pretty-printed file: outside strings, newlines are spaces
        batch = bytearray(batch.translate(NEWLINES_TO_SPACES))
    view = np.frombuffer(batch, np.uint8)
    seps = ends[:-1] + 1 + (len(arr.pending) - body_from)
    commas = view[seps] == COMMA
    view[seps[commas]] = NEWLINE
    for s in seps[~commas].tolist():  # whitespace before the comma
        view[batch.index(b",", s)] = NEWLINE
    if arr.records == 0:
        arr.first = bytes(batch[: batch.find(b"\n")] if ends.size > 1 else batch)
    arr.records += int(ends.size)
    tail = begins[begins > ends[-1]]  # a record this region leaves unfinished
    arr.pending = buf[int(tail[0]) : stop] if tail.size else b""
    arr.gap = b"" if arr.pending else buf[cut:stop]
    return batch, int(ends.size)


def _check_gap(arr: _Array, gap: bytes, result: Split) -> None:
    """Before an array's first record only whitespace; before any other, one comma."""
    if gap.strip(WHITESPACE) != (b"," if arr.records else b""):
        result.irregular.add(arr.key)


def loads(data: bytes | bytearray) -> Any:
    """orjson, except where an int may pass 64 bits (20 digits or more): orjson makes those floats."""
    return json.loads(data) if LONG_INT.search(data) else orjson.loads(data)


def batch_records(batch: bytes | bytearray) -> list:
    """The records of one batch `split` yielded, as Python objects (newlines only separate records)."""
    return loads(b"[" + batch.replace(b"\n", b",") + b"]")


SEPARATOR = re.compile(rb"}\s*,\s*{")
ARRAY_END = re.compile(rb"\s*\]")


def quick_split(path: Path, opening: re.Pattern) -> Iterator[bytes]:
    """Optimistic `split` of one array of objects, for files where no string or nested value holds
    `}` `,` `{` (a Chrome trace's events): newlines become spaces, every `}, {` a newline. A cut
    inside a string or a nested value leaves lines that are not JSON objects, so pyarrow refuses
    such a batch and the loop reads it again joined (batch_records undoes the cut). Whitespace
    around the commas is looked for in the first block only (a writer keeps one style; the search
    costs a sixth of the split), and in any block with no `},{`: a file that changes style after
    its first block leaves lines of several records, which the loop reads as well. Only a batch
    edge or the array's end in the wrong place fails here (NotJSON), and the caller reads the file
    with `split` instead. `opening` finds the array's `[` (its match ends there)."""
    carry, pretty = b"", None  # pretty: records separated with whitespace, as the first block shows
    with open_bytes(path) as handle:
        head = handle.read(BLOCK)
        found = opening.search(head)
        if not found:
            raise NotJSON("the array was not found at the start of the file")
        buf = head[found.end() :] or handle.read(BLOCK)
        while buf:
            data = carry + buf
            if b"\n" in data or b"\r" in data:  # compact JSON has none: looking is cheaper than a copy
                data = data.translate(NEWLINES_TO_SPACES)
            data = data.replace(b"},{", b"}\n{")  # compact JSON
            if pretty is None:
                pretty = bool(SEPARATOR.search(data))
            if pretty or b"}\n{" not in data:  # whitespace around the commas
                data = SEPARATOR.sub(b"}\n{", data)
            cut = data.rfind(b"\n{")
            carry, body = (data[cut + 1 :], data[:cut].lstrip(WHITESPACE)) if cut >= 0 else (data, b"")
            del data, buf  # only the batch is kept while it is read: the next block is read after
            if body.rstrip(WHITESPACE):  # the same bytes object where there is nothing to strip: no copy
                yield _shallow(body)
            del body
            buf = handle.read(BLOCK)
    # the last record (what is carried holds no record edge), then `]` and whatever follows the array
    tail = carry.lstrip(WHITESPACE)
    try:
        _, end = json.JSONDecoder().raw_decode(tail.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise NotJSON(f"the array's last record: {type(e).__name__}") from None
    end = len(tail.decode("utf-8")[:end].encode("utf-8"))
    if not ARRAY_END.match(tail, end) or opening.search(tail, end):
        raise NotJSON("the array does not end after its last record, or comes again")
    yield _shallow(tail[:end])


def _shallow(batch: bytes) -> bytes:
    """The batch, if no line of it opens MAX_DEPTH brackets (strings' too: a bound on its depth that
    needs no string scan); else NotJSON, so `split` measures the true depth. Counted on the batch
    with all but `{`, `[` and newlines deleted (a C loop: 0.06 s over 119 MB, where numpy masks
    over every byte took 0.6 s): the longest line of what is left is the most brackets a line opens.
    A batch whose lines are all shorter than MAX_DEPTH bytes (a profiler's usual) needs no count."""
    lines = np.r_[-1, np.flatnonzero(np.frombuffer(batch, np.uint8) == NEWLINE), len(batch)]
    if np.diff(lines).max() - 1 < MAX_DEPTH:
        return batch
    left = np.frombuffer(batch.translate(None, NOT_OPEN_OR_NEWLINE), np.uint8)
    newlines = np.r_[-1, np.flatnonzero(left == NEWLINE), left.size]
    if np.diff(newlines).max() - 1 >= MAX_DEPTH:
        raise NotJSON("a record opens many brackets: its depth is measured the careful way")
    return batch
