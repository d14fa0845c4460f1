"""A tune's dispatch table read back (results/<run>/tune/<model>/dispatch.json, search/tune.py writes it):
what to call for a GEMM of shape M x K x N in a dtype.

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

from neuronsweep.errors import UserError
from neuronsweep.workloads import user_code

FORMAT = 1


@dataclass(frozen=True)
class Choice:
    """What to call for one GEMM: the compiler's own (function None, built with `settings` where a tune
    chose other values of run-level keys) or a function with its params."""

    candidate: str
    function: str | None = None
    params: dict = field(default_factory=dict)
    m: int | None = None  # the measured M this answer comes from (None: a K x N the tune never saw)
    settings: dict = field(default_factory=dict)  # e.g. {"neuron.optlevel": 1}: the compiler's flags for this shape

    def load(self):
        """The function itself (imported as the sweep imports it), or None for the compiler's GEMM."""
        return None if self.function is None else user_code.load(self.function)


class Table:
    """A dispatch table: `lookup(m, k, n, dtype)` -> Choice."""

    def __init__(self, record: dict, source: str = "dispatch.json"):
        if record.get("format") != FORMAT:
            raise UserError(f"{source}: format {record.get('format')!r}, this neuron-sweep reads format {FORMAT}.")
        self.model = record.get("model")
        self.shapes = {key: sorted(entries, key=lambda e: e["m"]) for key, entries in record["shapes"].items()}

    def lookup(self, m: int, k: int, n: int, dtype: str) -> Choice:
        """What to call for an M x K by K x N GEMM in `dtype` (the module's rule for an M not measured)."""
        entries = self.shapes.get(f"{dtype}:{k}x{n}")
        if not entries:
            return Choice("compiler")
        e = next((e for e in entries if e["m"] >= m), entries[-1])
        params, settings = dict(e.get("params") or {}), dict(e.get("settings") or {})
        return Choice(e["candidate"], e.get("function"), params, e["m"], settings)


def load(path: str | Path) -> Table:
    """The dispatch table of a tune (its dispatch.json)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a dispatch table ({exc}); give a tune's dispatch.json.") from None
    return Table(record, str(path))
