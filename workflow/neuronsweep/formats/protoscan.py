"""The fields of many protobuf messages at once, with numpy.

A trace holds millions of small messages (TracePackets, TrackEvents, DebugAnnotations), and reading
them one by one through the protobuf classes costs about 100 ns per field in Python. Here the decode
loop runs once per field *position* (every message's first field, then every message's second, ...)
over all the messages together, so Python's cost is per position, not per message. Field values are
returned raw (varint values, fixed-width bits, a LEN payload's offset and length); what they mean is
the caller's, from the .proto.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """The varints starting at `pos`, and the position after each."""
    out = np.zeros(pos.size, np.uint64)
    cur = pos.copy()
    idx = np.arange(pos.size)
    for shift in _SHIFTS:
        b = buf[cur[idx]]
        out[idx] |= (b & 0x7F).astype(np.uint64) << shift
        cur[idx] += 1
        idx = idx[b >= 0x80]
        if not idx.size:
            return out, cur
        if cur[idx].max() >= buf.size:
            break
    raise DecodeError("a varint runs past its message")


def fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Little-endian fixed-width values (I64 or I32) at `pos`, as uint64 bits."""
    raw = buf[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(f"<u{width}").ravel().astype(np.uint64)


def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """Every field of the messages buf[starts[i]:ends[i]] (buf from `padded`)."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    pos = starts.copy()
    active = np.flatnonzero(pos < ends)
    parts = []
    while active.size:
        key, p = varints(buf, pos[active])
        wire, num = (key & np.uint64(7)).astype(np.uint8), (key >> np.uint64(3)).astype(np.int64)
        value, at = np.zeros(active.size, np.uint64), p.copy()
        for kind in np.unique(wire).tolist():
            sel = np.flatnonzero(wire == kind)
            if kind == VARINT:
                value[sel], p[sel] = varints(buf, p[sel])
            elif kind == LEN:
                length, body = varints(buf, p[sel])
                value[sel], at[sel], p[sel] = length, body, body + length.astype(np.int64)
            elif kind in (I64, I32):
                width = 8 if kind == I64 else 4
                value[sel], p[sel] = fixed(buf, p[sel], width), p[sel] + width
            else:
                raise DecodeError(f"wire type {kind} (groups are not used by these messages)")
        if (p > ends[active]).any():
            raise DecodeError("a field runs past its message")
        parts.append((active, num, wire, value, at))
        pos[active] = p
        active = active[p < ends[active]]
    if not parts:
        empty = np.zeros(0, np.int64)
        return Fields(empty, empty, empty.astype(np.uint8), empty.astype(np.uint64), empty)
    cols = [np.concatenate(c) for c in zip(*parts)]
    order = np.argsort(cols[0], kind="stable")  # message by message; within one, wire order
    return Fields(*(c[order] for c in cols))


def text(raw: bytes, at: np.ndarray, length: np.ndarray) -> list[str]:
    """LEN payloads of `raw` (the unpadded data) as UTF-8 strings (names, string values)."""
    return [raw[a : a + n].decode("utf-8", "replace") for a, n in zip(at.tolist(), length.tolist())]
