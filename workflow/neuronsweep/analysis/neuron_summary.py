"""Read a profile summary in any shape the Neuron tools (or our cpu view) write.

Shapes seen in the wild (reference/neuron-toolchain.md §3): neuron-explorer's `{"n_<hash>": {...}}`,
a `{"Summary": [{...}]}` wrapper, and a flat dict; the tools may print log lines before the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError


def parse(text: str, source: str = "summary") -> dict:
    start = text.find("{")
    if start < 0:
        raise UserError(f"{source}: no JSON object found; was the view run with --output-format summary-json?")
    try:
        obj = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: the summary JSON is malformed ({exc.msg} at char {start + exc.pos}); "
                        "rerun the view stage.") from None
    return unwrap(obj, source)


def unwrap(obj, source: str = "summary") -> dict:
    if isinstance(obj, dict) and isinstance(obj.get("Summary"), list) and obj["Summary"]:
        return obj["Summary"][0]
    values = list(obj.values()) if isinstance(obj, dict) else []
    if values and all(isinstance(v, dict) for v in values) and all(str(k).startswith("n_") for k in obj):
        if len(values) > 1:
            raise UserError(f"{source}: holds {len(values)} profiles ({', '.join(obj)}); "
                            "view one NTFF at a time.")
        return values[0]
    if isinstance(obj, dict):
        return obj
    raise UserError(f"{source}: expected a JSON object of summary counters, found {type(obj).__name__}.")


def load(path: str | Path) -> dict:
    return parse(Path(path).read_text(), str(path))
