"""Protobuf wire encoding of whole columns: a row's bytes per value, made with numpy and pyarrow.

A million-slice trace is normal; the protobuf classes cost about 3 us a message, so the .pftrace
writer (pftrace.py) and the Chrome trace reader that spills each event's args already encoded
(chrome_trace.py) build fields a column at a time here. Each function gives the bytes the
protobuf classes would write for the same values (tests re-serialize the files and compare).
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike

from neuronsweep.formats import arrow_json

EMPTY = pa.scalar(b"", pa.large_binary())
# DebugAnnotation (perfetto_trace.proto): its value fields and name, and TrackEvent.debug_annotations
ANN_BOOL, ANN_INT, ANN_DOUBLE, ANN_STRING, ANN_NAME = b"\x10", b"\x20", b"\x29", b"\x32", b"\x52"
ANNOTATION = b"\x22"
_INT64 = (-(2**63), 2**63 - 1)


# ----------------------------------------------------------------------------------- one value


def varint(n: int) -> bytes:
    """`n` as a protobuf varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length as a varint, the payload."""
    return tag + varint(len(payload)) + payload


def annotation(key: object, value: object) -> bytes:
    """One debug annotation as the loop reads it from a dict: ints, bools, floats as themselves,
    anything else as its JSON text."""
    if isinstance(value, bool):
        body = ANN_BOOL + (b"\x01" if value else b"\x00")
    elif isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        body = ANN_INT + varint(value & 0xFFFFFFFFFFFFFFFF)  # int64 on the wire: two's complement
    elif isinstance(value, float):
        body = ANN_DOUBLE + struct.pack("<d", value)
    else:
        body = field(ANN_STRING, (value if isinstance(value, str) else json.dumps(value)).encode())
    return field(ANNOTATION, body + field(ANN_NAME, str(key).encode()))


# ------------------------------------------------------------------------------------- columns


def ragged(lengths: np.ndarray, data: bytes | np.ndarray) -> pa.Array:
    """A binary column from each row's length and all rows' bytes one after another."""
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), lengths.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# A part of a row: its blocks of bytes side by side (bytes: the same in every row; a uint8 array of
# a byte per row, or of k bytes per row) and each row's length (its first bytes are the row's).
# Parts side by side are written into one matrix and gathered once (rows_of): a packet's dozen
# fields cost one copy.


def varint_part(values: ArrayLike, tag: bytes = b"", mask: np.ndarray | None = None) -> tuple[list, np.ndarray]:
    """Each row `tag` + the varint of its value (negative int64 as two's complement), empty where
    `mask` is False; as wide as the largest value needs."""
    v = np.asarray(values).astype(np.uint64)
    width = max(1, -(-(int(v.max()) if v.size else 0).bit_length() // 7))
    blocks: list = [tag]
    lengths = np.full(v.size, len(tag) + 1, np.int64)
    for _ in range(width):
        rest = v >> np.uint64(7)
        more = rest > 0
        blocks.append((v & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7))
        lengths += more
        v = rest
    if mask is not None:
        lengths[~mask] = 0
    return blocks, lengths


def fixed_part(tag: bytes, payload: np.ndarray, mask: np.ndarray | None = None) -> tuple[list, np.ndarray]:
    """Each row `tag` + its fixed-size payload (an (n, k) uint8 array), empty where `mask` is False."""
    width = len(tag) + payload.shape[1]
    return [tag, payload], np.full(payload.shape[0], width, np.int64) if mask is None else np.where(mask, width, 0)


def _width(block: bytes | np.ndarray) -> int:
    return len(block) if isinstance(block, bytes) else 1 if block.ndim == 1 else block.shape[1]


def rows_of(*parts: tuple[list, np.ndarray]) -> pa.Array:
    """A binary column of each row's parts one after another: one matrix, one mask, one gather.
    The blocks are written straight into the matrix (a matrix per part, joined, cost a copy more);
    the mask compares each column's place in its part with the row's length of that part, gathered
    as bytes (a comparison per part, broadcast, cost five times as much)."""
    n = parts[0][1].size
    widths = [sum(map(_width, blocks)) for blocks, _ in parts]
    matrix = np.empty((n, sum(widths)), np.uint8)
    j = 0
    for block in (b for blocks, _ in parts for b in blocks):
        w = _width(block)
        matrix[:, j : j + w] = np.frombuffer(block, np.uint8) if isinstance(block, bytes) else block.reshape(n, w)
        j += w
    small = np.uint8 if j < 256 else np.int64
    lengths = np.stack([length for _, length in parts], 1).astype(small)
    place = np.concatenate([np.arange(w, dtype=small) for w in widths])
    keep = place < lengths[:, np.repeat(np.arange(len(parts)), widths)]
    return ragged(np.add.reduce([length for _, length in parts]), matrix[keep])


def join(*parts: bytes | pa.Array) -> pa.Array:
    """Each row the concatenation of the parts' rows (bytes: the same in every row)."""
    return pc.binary_join_element_wise(
        *(pa.scalar(p, pa.large_binary()) if isinstance(p, bytes) else p for p in parts), EMPTY
    )


def _struct_annotations(args: pa.StructArray) -> pa.Array | None:
    """From an Arrow struct (the Chrome trace reader's fast path): the bytes `annotation` makes of
    the same values; None where a child's values are not all ones it makes exactly here (floats:
    Arrow parses 1 and 1.5 both as doubles, where the loop keeps 1 an int). The fixed-size fields
    of each child are one gather (rows_of), and all children one join."""
    n = len(args)
    parent = args.is_valid().to_numpy(zero_copy_only=False)
    none = np.zeros((n, 0), np.uint8)
    pieces = []
    for i, f in enumerate(args.type):
        child = pc.struct_field(args, [i])
        valid = parent & child.is_valid().to_numpy(zero_copy_only=False)
        if not valid.any():
            continue
        name = fixed_part(field(ANN_NAME, f.name.encode()), none, valid)
        if pa.types.is_int64(f.type) or pa.types.is_boolean(f.type):
            if pa.types.is_int64(f.type):
                value = varint_part(child.fill_null(0).to_numpy(zero_copy_only=False), ANN_INT, valid)
            else:
                value = fixed_part(
                    ANN_BOOL, child.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)[:, None], valid
                )
            pieces.append(rows_of(varint_part(value[1] + name[1], ANNOTATION, valid), value, name))
            continue
        text = child if pa.types.is_string(f.type) else arrow_json.text(child)  # a list as its JSON text
        if text is None:
            return None
        text = pc.if_else(pa.array(valid), text.cast(pa.large_binary()), EMPTY)
        length = pc.binary_length(text).to_numpy()  # 0 where not valid (EMPTY)
        size = varint_part(length, ANN_STRING, valid)
        body = size[1] + length + name[1]
        pieces += [rows_of(varint_part(body, ANNOTATION, valid), size), text, rows_of(name)]
    return join(*pieces) if pieces else ragged(np.zeros(n, np.int64), b"")


def debug_annotations(args: pa.StructArray | list) -> pa.Array | None:
    """Each row's TrackEvent.debug_annotations, from an Arrow struct column (None: see
    _struct_annotations) or a list of dicts."""
    if isinstance(args, pa.StructArray):
        return _struct_annotations(args)
    encoded = [b"".join([annotation(k, v) for k, v in a.items()]) for a in args]
    return ragged(np.fromiter(map(len, encoded), np.int64, len(encoded)), b"".join(encoded))
