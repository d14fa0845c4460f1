"""Read a profile summary in any shape the Neuron tools (or our cpu view) write.

Shapes seen in the wild: summary-json's `{"n_<hash>": {...}}`,
a `{"Summary": [{...}]}` wrapper, the legacy full-profile JSON's `{"summary": [{...}], "instruction":
[...], ...}` (real inf2 files: tests/data/neuron/inf2-profiles/), and a flat dict; the tools may print
log lines before the JSON. Whatever the shape, the result must hold the summary's times: a file
without them is refused, never read as a summary whose every metric is null.
"""

from __future__ import annotations

import json
from pathlib import Path

from neuronsweep.errors import UserError
from neuronsweep.formats.legacy_json import first_record


def parse(text: str, source: str = "summary") -> dict:
    start = text.find("{")
    if start < 0:
        raise UserError(f"{source}: no JSON object found; was the view run with --output-format summary-json?")
    try:
        obj = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{source}: the summary JSON is malformed ({exc.msg} at char {start + exc.pos}); rerun the view stage."
        ) from None
    return unwrap(obj, source)


REQUIRED = ("total_time",)  # every summary shape the tools write has it (seconds)
STREAM_ABOVE = 16 * 2**20  # summary-json is kilobytes; a file this large is a full profile: stream it


def unwrap(obj, source: str = "summary") -> dict:
    for key in ("Summary", "summary"):  # parquet-style wrapper; legacy full profile
        if isinstance(obj, dict) and isinstance(obj.get(key), list) and obj[key]:
            return obj[key][0]
    values = list(obj.values()) if isinstance(obj, dict) else []
    if values and all(isinstance(v, dict) for v in values) and all(str(k).startswith("n_") for k in obj):
        if len(values) > 1:
            raise UserError(f"{source}: holds {len(values)} profiles ({', '.join(obj)}); view one NTFF at a time.")
        return values[0]
    if isinstance(obj, dict):
        return obj
    raise UserError(f"{source}: expected a JSON object of summary counters, found {type(obj).__name__}.")


def load(path: str | Path) -> dict:
    """The summary counters of any summary file: raw or unwrapped summary-json, or a legacy full
    profile (streamed when large); refuses a file that holds no summary times."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"{path}: no such file; pass a view's summary.json, raw summary-json output or a legacy profile JSON."
        )
    if path.stat().st_size > STREAM_ABOVE:
        summary = first_record(path, "summary") or {}
    else:
        summary = parse(path.read_text(errors="replace"), str(path))
    missing = [k for k in REQUIRED if summary.get(k) is None]
    if missing:
        raise UserError(
            f"{path}: holds no profile summary ({', '.join(missing)} absent); pass a view's "
            "summary.json, the output of `view --output-format summary-json`, or a legacy "
            "`--output-format json` profile."
        )
    return summary
