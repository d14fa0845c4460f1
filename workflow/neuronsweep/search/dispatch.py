"""A tune's dispatch table (results/<run>/tune/<model>/dispatch.json): what to call for a GEMM of shape
M x K x N in a dtype. One type, `Choice`, and one `Table` that the tune writes (search/tune_table.py) and a
runtime reads back (`load`).

The JSON, format 1: {"format": 1, "model", "run", "shapes": {"<dtype>:<K>x<N>": [entry, ...]}}, the entries
of one dtype and K x N by M ascending, each {"m", "candidate" ("compiler" or a suites.custom entry's name),
"function" (FILE.py:NAME or module:NAME, null for the compiler), "params" (keywords), "settings" (the run-level
keys the compiler's build is made with where a tune's `settings:` chose other values than the config's, e.g.
{"neuron.optlevel": 1}; {} otherwise, and absent from tables written before it), "speedup"}.

An M the tune did not measure takes the entry of the smallest measured M at least as large (a bucket: the
model pads up to it), or the largest where M is past every one; a K x N it never saw is the compiler's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError
from neuronsweep.search.space import Point
from neuronsweep.workloads import user_code

FORMAT = 1
COMPILER = "compiler"  # the backend's own build of the GEMM: every shape's default


@dataclass(frozen=True)
class Choice:
    """What to call for one GEMM: the compiler's own (function None, built with `settings` where a tune
    chose other values of run-level keys) or a function with its params; `speedup` over the compiler's build
    as judged (not part of what to call, so not compared)."""

    candidate: str
    function: str | None = None
    params: Point = field(default_factory=dict)
    m: int | None = None  # the measured M this answer comes from (None: a K x N the tune never saw)
    settings: dict = field(default_factory=dict)  # e.g. {"neuron.optlevel": 1}: the compiler's flags for this shape
    speedup: float | None = field(default=None, compare=False)

    def load(self) -> Any:
        """The function itself (imported as the sweep imports it), or None for the compiler's GEMM."""
        return None if self.function is None else user_code.load(self.function)

    def to_json(self) -> dict:
        """The entry as dispatch.json keeps it."""
        keys = ("m", "candidate", "function", "params", "settings", "speedup")
        return {k: getattr(self, k) for k in keys}

    @classmethod
    def from_json(cls, entry: dict) -> Choice:
        """An entry of dispatch.json (a table written before `settings` has none)."""
        return cls(
            entry["candidate"],
            entry.get("function"),
            dict(entry.get("params") or {}),
            entry["m"],
            dict(entry.get("settings") or {}),
            entry.get("speedup"),
        )


class Table:
    """A dispatch table: per dtype and K x N its choices by M; `lookup(m, k, n, dtype)` -> Choice."""

    def __init__(self, model: str | None, run: str | None, shapes: dict[str, list[Choice]]) -> None:
        self.model, self.run = model, run
        self.shapes = {key: sorted(entries, key=lambda e: e.m or 0) for key, entries in shapes.items()}

    @staticmethod
    def key(k: int, n: int, dtype: str) -> str:
        """The shapes' key of a dtype and K x N."""
        return f"{dtype}:{k}x{n}"

    def lookup(self, m: int, k: int, n: int, dtype: str) -> Choice:
        """What to call for an M x K by K x N GEMM in `dtype` (the module's rule for an M not measured)."""
        entries = self.shapes.get(self.key(k, n, dtype))
        if not entries:
            return Choice(COMPILER)
        return next((e for e in entries if (e.m or 0) >= m), entries[-1])

    def to_json(self) -> dict:
        """The table as dispatch.json keeps it."""
        shapes = {key: [e.to_json() for e in entries] for key, entries in self.shapes.items()}
        return {"format": FORMAT, "model": self.model, "run": self.run, "shapes": shapes}

    @classmethod
    def from_json(cls, record: dict, source: str = "dispatch.json") -> Table:
        """The table from dispatch.json's object; another format is one sentence."""
        if record.get("format") != FORMAT:
            raise UserError(f"{source}: format {record.get('format')!r}, this neuron-sweep reads format {FORMAT}.")
        shapes = {key: [Choice.from_json(e) for e in entries] for key, entries in record["shapes"].items()}
        return cls(record.get("model"), record.get("run"), shapes)


def load(path: str | Path) -> Table:
    """The dispatch table of a tune (its dispatch.json)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a dispatch table ({exc}); give a tune's dispatch.json.") from None
    return Table.from_json(record, str(path))
