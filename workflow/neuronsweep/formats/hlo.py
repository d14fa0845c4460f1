"""The instructions of an HLO module dump (XLA's `--xla_dump_to` text, e.g.
module_0000.SyncTensorsGraph.5.cpu_after_optimizations.txt) as rows of an "instruction" table.

The optimized module is what XLA actually runs, so its op mix (dots, fusions, copies, transposes)
is the xla backend's counterpart of the Neuron profile's Instruction table. It has no per-op time (only
torch-xla's profiler records one, which a layer case's capture runs: backends/xla_split.py), so the
table carries counts and sizes, not durations.
Each row says which computation it is in: the entry, a fusion body (called by a `fusion` op, so it
runs inside that op), or another called computation (to_apply of call/reduce/map...).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from neuronsweep.atomic import replacing

COMPUTATION = re.compile(r"^(ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
INSTRUCTION = re.compile(
    r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*"
    r"(?P<shape>\([^=]*?\)|[a-z][a-z0-9]*\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<opcode>[a-z][a-z0-9\-]*)\((?P<rest>.*)$"
)
ARRAY = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[0-9,]*)\]")
CALLS = re.compile(r"\b(?:calls|to_apply)=%?([\w.\-]+)")
FUSION_KIND = re.compile(r"\bkind=(k\w+)")
OPERAND = re.compile(r"%([\w.\-]+)")
METADATA = re.compile(r'(op_type|op_name|source_file)="([^"]*)"|(source_line)=(\d+)')

# column -> type of the Instruction table: "int" and "bool" columns, every other one text
COLUMNS = {
    "computation": "str",
    "computation_kind": "str",
    "hlo_name": "str",
    "opcode": "str",
    "is_root": "bool",
    "dtype": "str",
    "shape": "str",
    "elements": "int",
    "fusion_kind": "str",
    "calls": "str",
    "op_type": "str",
    "op_name": "str",
    "source_location": "str",
    "operands": "str",
}


def _elements(shape: str) -> int:
    """Elements of an array shape, or of every array in a tuple shape."""
    return sum(math.prod(int(d) for d in m["dims"].split(",") if d) for m in ARRAY.finditer(shape))


def _operand_list(rest: str) -> str:
    """The text of an instruction's operands: `rest` (after "opcode(") up to its closing parenthesis."""
    depth = 1
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return rest[:i]
    return rest


def parse(text: str) -> list[dict]:
    """One dict per instruction (COLUMNS), in file order."""
    rows, computation, entry = [], None, None
    for line in text.splitlines():
        head = COMPUTATION.match(line)
        if head:
            computation = head["name"]
            if head.group(1):
                entry = computation
            continue
        inst = INSTRUCTION.match(line)
        if not inst or computation is None:
            continue
        rest = inst["rest"]
        meta = {}
        for m in METADATA.finditer(rest):
            if m.group(1):
                meta[m.group(1)] = m.group(2)
            else:
                meta[m.group(3)] = m.group(4)
        arrays = ARRAY.findall(inst["shape"])
        calls = CALLS.search(rest)
        kind = FUSION_KIND.search(rest)
        source = f"{meta['source_file']}:{meta.get('source_line', '?')}" if "source_file" in meta else None
        rows.append(
            {
                "computation": computation,
                "computation_kind": None,
                "hlo_name": inst["name"],
                "opcode": inst["opcode"],
                "is_root": bool(inst["root"]),
                "dtype": arrays[0][0] if len(arrays) == 1 else ("tuple" if arrays else None),
                "shape": inst["shape"].split("{")[0] if not inst["shape"].startswith("(") else inst["shape"],
                "elements": _elements(inst["shape"]),
                "fusion_kind": kind.group(1) if kind and inst["opcode"] == "fusion" else None,
                "calls": calls.group(1) if calls else None,
                "op_type": meta.get("op_type"),
                "op_name": meta.get("op_name"),
                "source_location": source,
                "operands": ",".join(OPERAND.findall(_operand_list(rest))),
            }
        )
    fused = {r["calls"] for r in rows if r["opcode"] == "fusion" and r["calls"]}
    for r in rows:
        r["computation_kind"] = (
            "entry" if r["computation"] == entry else "fused" if r["computation"] in fused else "called"
        )
    return rows


def read(path: str | Path) -> list[dict]:
    """The HLO module's instructions as rows (parse) from a text file."""
    return parse(Path(path).read_text())


def write_parquet(rows: list[dict], out: Path) -> None:
    """The rows as an Instruction parquet table (the name the Neuron parquet output uses)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "int": pa.int64(), "bool": pa.bool_()}
    schema = pa.schema([(name, types[kind]) for name, kind in COLUMNS.items()])
    with replacing(out) as tmp:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
