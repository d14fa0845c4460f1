"""Read a profile summary in any shape the Neuron tools (or our cpu view) write.

Shapes seen in the wild: summary-json's `{"n_<hash>": {...}}`,
a `{"Summary": [{...}]}` wrapper, the legacy full-profile JSON's `{"summary": [{...}], "instruction":
[...], ...}` (real inf2 files: tests/data/neuron/inf2-profiles/), and a flat dict; the tools may print
log lines before the JSON. And summary-text (`view --output-format summary-text`), as users paste it
into notes and issues: a shell prompt and the command (possibly wrapped), `WARN` lines, the `n_<hash>`
line, then one `    key   value` line per field in no fixed order, values with spaces kept as text (real
trn2 outputs: tests/data/neuron/trn2-summary-text/). Whatever the shape, the result must hold the
summary's times: a file without them is refused, never read as a summary whose every metric is null.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError
from neuronsweep.formats.legacy_json import first_record
from neuronsweep.json_numbers import finite_number

PROFILE_LINE = re.compile(r"^n_[0-9a-f]+[ \t]*$", re.M)  # summary-text's line naming the profile
FIELD_LINE = re.compile(r"^[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+(\S(?:.*\S)?)[ \t]*$")  # its `    key   value`


def parse(text: str, source: str = "summary") -> dict:
    """The summary the profiler printed as one flat summary: summary-json (log lines before it skipped), or
    summary-text where the text has its `n_<hash>` line and no JSON object."""
    if PROFILE_LINE.search(text) and not re.search(r"^\s*\{", text, re.M):
        return parse_text(text, source)
    start = text.find("{")
    if start < 0:
        raise UserError(f"{source}: no JSON object found; was the view run with --output-format summary-json?")
    try:
        obj = json.loads(text[start:])
    except RecursionError:
        raise UserError(f"{source}: values nested deeper than Python can read; not a Neuron summary.") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{source}: the summary JSON is malformed ({exc.msg} at char {start + exc.pos}); rerun the view stage."
        ) from None
    return unwrap(obj, source)


def parse_text(text: str, source: str = "summary") -> dict:
    """summary-text as a flat summary: each `key value` line after the `n_<hash>` line, a value a number where
    it reads as one, else its text (versions: `2.27.23 (8deec)`); what is not such a line (a trailing prompt)
    is not a field. Two profiles in one text are refused, as in summary-json."""
    starts = [m.end() for m in PROFILE_LINE.finditer(text)]
    if len(starts) > 1:
        raise UserError(f"{source}: holds {len(starts)} profiles (n_<hash> lines); view one NTFF at a time.")
    fields = {}
    for line in text[starts[0] :].splitlines():
        found = FIELD_LINE.match(line)
        if found:
            key, value = found.groups()
            fields[key] = _number(value)
    return fields


def _number(text: str) -> int | float | str:
    """A summary-text value as summary-json has it: an int, a float, or the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


REQUIRED = ("total_time",)  # every summary shape the tools write has it (seconds)
STREAM_ABOVE = 16 * 2**20  # summary-json is kilobytes; a file this large is a full profile: stream it


def unwrap(obj: Any, source: str = "summary") -> dict:
    """The one summary record of a summary object, whichever wrapper the profile version used."""
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


INVALID = "neuronsweep_invalid_fields"  # field -> why it was left out (validate)


def _rule(field: str) -> tuple[str, float, float] | None:
    """What a summary field holds, by the Neuron tools' naming: (what, low, high); None: anything."""
    if field.endswith("_percent"):
        return "a fraction 0..1", 0.0, 1.0 + 1e-9  # the tools write fractions (real inf2 files); rounding
    if field.endswith(("_time", "_bytes", "_count", "_flops")) or field == "pe_clock_freq":
        return "a number >= 0", 0.0, math.inf
    return None


def validate(summary: dict, source: str) -> dict:
    """The summary with every field whose name says what it holds checked (type, finite, range): a
    field that cannot be true is left out, with why under INVALID; total_time must be a positive
    number, or the file is refused in one sentence."""
    clean, invalid = {}, {}
    for field, value in summary.items():
        rule = _rule(str(field))
        if rule is None or value is None:
            clean[field] = value
            continue
        what, low, high = rule
        number = finite_number(value)
        if number is None or not low <= number <= high:
            invalid[field] = f"the summary's {field} is {json.dumps(value)[:60]}, not {what}: left out"
        else:
            clean[field] = int(number) if isinstance(value, int) and not isinstance(value, bool) else number
    total = clean.get("total_time")
    if "total_time" in invalid or (total is not None and total <= 0):
        raise UserError(
            f"{source}: total_time is {json.dumps(summary.get('total_time'))[:60]}, not a time above 0 s; "
            "the profile is damaged or not a Neuron summary (view the capture again)."
        )
    if invalid:
        clean[INVALID] = invalid
    return clean


PEAK_FIELDS = (  # the device metadata the roofline's peaks come from (analysis/roofline.metadata_peaks)
    "pe_num_rows",
    "pe_num_cols",
    "pe_clock_freq",
    "tensor_engine_num_rows",
    "tensor_engine_num_cols",
    "tensor_engine_clock_freq",
    "hbm_ddr_bandwidth",
    "dma_ddr_bandwidth",
    "num_physical_cores",
)


def metadata(meta: dict | None) -> dict | None:
    """The profile's device metadata with each peak field a number above 0 or left out (a damaged
    file never gives a peak: the target's table does, with its source)."""
    if not meta:
        return meta
    clean = {k: v for k, v in meta.items() if k not in PEAK_FIELDS}
    for field in PEAK_FIELDS:
        number = finite_number(meta.get(field))
        if number is not None and number > 0:
            clean[field] = int(number) if number.is_integer() and not isinstance(meta[field], float) else number
    return clean


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
    if not isinstance(summary, dict):
        raise UserError(f"{path}: its summary is a {type(summary).__name__}, not an object of counters.")
    missing = [k for k in REQUIRED if summary.get(k) is None]
    if missing:
        raise UserError(
            f"{path}: holds no profile summary ({', '.join(missing)} absent); pass a view's "
            "summary.json, the output of `view --output-format summary-json`, or a legacy "
            "`--output-format json` profile."
        )
    return validate(summary, str(path))
