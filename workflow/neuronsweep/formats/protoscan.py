"""The fields of many protobuf messages at once, with numpy.

A trace holds millions of small messages (TracePackets, TrackEvents, DebugAnnotations), and reading
them one by one through the protobuf classes costs about 100 ns per field in Python. Here the decode
loop runs once per field *position* (every message's first field, then every message's second, ...)
over all the messages together, so Python's cost is per position, not per message. Field values are
returned raw (varint values, fixed-width bits, a LEN payload's offset and length); what they mean is
the caller's, from the .proto.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

VARINT, I64, LEN, I32 = 0, 1, 2, 5
PAD = 16  # zero bytes after the data, so a varint read never indexes past the buffer
_SHIFTS = [np.uint64(7 * k) for k in range(10)]


class DecodeError(ValueError):
    """The bytes are not the protobuf wire format the scan expects."""

    pass


@dataclass
class Fields:
    """One row per field occurrence, grouped by message in message order, fields in wire order."""

    msg: np.ndarray  # index of the message (into the starts given)
    num: np.ndarray  # field number
    wire: np.ndarray  # wire type
    value: np.ndarray  # uint64: a varint's value, an I64/I32's bits, a LEN's length
    at: np.ndarray  # offset of a LEN's payload in the buffer

    def where(self, num: int, wire: int | None = None) -> np.ndarray:
        """The mask of the fields numbered `num` (of wire type `wire`, when given)."""
        mask = self.num == num
        return mask & (self.wire == wire) if wire is not None else mask

    def last(self, num: int, n: int, default: int = 0, dtype: DTypeLike = np.uint64) -> tuple[np.ndarray, np.ndarray]:
        """Per message, the value of field `num` (the last occurrence wins, as protobuf says) and
        whether it was present."""
        out: np.ndarray = np.full(n, default, dtype)
        present = np.zeros(n, bool)
        idx = np.flatnonzero(self.num == num)
        msg = self.msg[idx]
        if idx.size:  # numpy does not define which of a repeated index's assignments wins
            idx = idx[np.append(msg[1:] != msg[:-1], True)]
        out[self.msg[idx]] = self.value[idx].astype(dtype, copy=False)
        present[self.msg[idx]] = True
        return out, present


def padded(data: bytes | bytearray | memoryview) -> np.ndarray:
    """The bytes as uint8 with PAD zero bytes after them, so a varint read never runs past the end."""
    return np.frombuffer(bytes(data) + bytes(PAD), np.uint8)


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints starting at `pos`, and the position after each. Most are one byte (field keys,
    small lengths): the first byte is read for all at once, the rest only where a varint goes on."""
    b = buf[pos]
    out = (b & 0x7F).astype(np.uint64)
    cur = pos + 1
    idx = np.flatnonzero(b >= 0x80)
    for shift in _SHIFTS[1:]:
        if not idx.size:
            return out, cur
        if cur[idx].max() >= buf.size:
            break
        b = buf[cur[idx]]
        out[idx] |= (b & 0x7F).astype(np.uint64) << shift
        cur[idx] += 1
        idx = idx[b >= 0x80]
    if not idx.size:
        return out, cur
    raise DecodeError("a varint runs past its message")


def fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Little-endian fixed-width values (I64 or I32) at `pos`, as uint64 bits."""
    raw = buf[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(f"<u{width}").ravel().astype(np.uint64)


def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """Every field of the messages buf[starts[i]:ends[i]] (buf from `padded`). The k-th field of a
    message goes to row first[message] + k, so the rows come out grouped by message without a sort."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    pos = starts.copy()
    active = np.flatnonzero(pos < ends)
    parts: list[tuple[np.ndarray, ...]] = []
    while active.size:
        key, p = varints(buf, pos[active])
        wire, num = (key & np.uint64(7)).astype(np.uint8), (key >> np.uint64(3)).astype(np.int64)
        kinds = np.flatnonzero(np.bincount(wire, minlength=8)).tolist()
        if len(kinds) == 1:
            value, at, p = _values(buf, p, kinds[0])
        else:
            value, at = np.zeros(active.size, np.uint64), p.copy()
            for kind in kinds:
                sel = np.flatnonzero(wire == kind)
                value[sel], at[sel], p[sel] = _values(buf, p[sel], kind)
        if (p > ends[active]).any():
            raise DecodeError("a field runs past its message")
        parts.append((active, num, wire, value, at))
        pos[active] = p
        active = active[p < ends[active]]
    if not parts:
        empty = np.zeros(0, np.int64)
        return Fields(empty, empty, empty.astype(np.uint8), empty.astype(np.uint64), empty)
    count = np.zeros(starts.size, np.int64)
    for k, part in enumerate(parts):  # a message in part k has had k fields before
        count[part[0]] = k + 1
    first = np.cumsum(count) - count
    total = int(count.sum())
    cols = [np.empty(total, dtype) for dtype in (np.int64, np.int64, np.uint8, np.uint64, np.int64)]
    for k, part in enumerate(parts):
        rows = first[part[0]] + k
        for col, values in zip(cols, part):
            col[rows] = values
    return Fields(*cols)


def _values(buf: np.ndarray, p: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values of fields of one wire type whose keys end at `p`: each value, where its payload
    starts (a LEN's; else `p`), and the position after the field."""
    if kind == VARINT:
        value, after = varints(buf, p)
        return value, p, after
    if kind == LEN:
        value, at = varints(buf, p)
        return value, at, at + value.astype(np.int64)
    if kind in (I64, I32):
        width = 8 if kind == I64 else 4
        return fixed(buf, p, width), p, p + width
    raise DecodeError(f"wire type {kind} (groups are not used by these messages)")


def text(raw: bytes, at: np.ndarray, length: np.ndarray) -> list[str]:
    """LEN payloads of `raw` (the unpadded data) as UTF-8 strings (names, string values)."""
    return [raw[a : a + n].decode("utf-8", "replace") for a, n in zip(at.tolist(), length.tolist())]


_LOW = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)  # the low k bytes of a word
_MIX = [np.uint64(m) for m in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)]
SHORT = 16  # bytes: a payload this long or shorter is told apart by two words


def _unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique's values and inverse; by hashing where numpy can (2.3 and later), which is twice as fast."""
    try:
        keys, inverse = np.unique(values, return_inverse=True, sorted=False)
    except TypeError:  # numpy before 2.3 sorts
        keys, inverse = np.unique(values, return_inverse=True)
    return keys, inverse.reshape(-1)


def texts(
    buf: np.ndarray, raw: bytes, at: np.ndarray, length: np.ndarray, convert: Callable[[str], Any] = str
) -> np.ndarray:
    """`text` as an object array, each distinct payload decoded (and `convert`ed) once: a million
    slices have a few hundred names. A payload of up to SHORT bytes is read as two little-endian
    words and hashed; a hash shared by payloads that differ sends them all the one-by-one way."""
    at, length = np.asarray(at, np.int64), np.asarray(length, np.int64)
    out = np.empty(at.size, object)
    short = length <= SHORT
    if short.any():
        a, n = at[short], length[short]
        words = np.ndarray((buf.size - 7,), "<u8", buf, 0, (1,))  # the word at every byte (PAD covers the end)
        lo = words[a] & _LOW[np.minimum(n, 8)]
        hi = words[a + 8] & _LOW[np.clip(n - 8, 0, 8)]
        h = lo * _MIX[0] ^ hi * _MIX[1] ^ n.astype(np.uint64) * _MIX[2]
        keys, inverse = _unique(h)
        rep = np.empty(keys.size, np.int64)
        rep[inverse] = np.arange(a.size)  # any member stands for its hash
        r = rep[inverse]
        if (lo[r] == lo).all() and (hi[r] == hi).all() and (n[r] == n).all():
            found = [convert(s) for s in text(raw, a[rep], n[rep])]
            out[short] = np.array(found + [None], object)[:-1][inverse]  # [None]: strs, not chars
        else:
            out[short] = [convert(s) for s in text(raw, a, n)]
    if not short.all():
        out[~short] = [convert(s) for s in text(raw, at[~short], length[~short])]
    return out
