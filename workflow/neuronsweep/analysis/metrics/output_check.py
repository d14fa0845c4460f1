"""Whether the case's output was right: its error against the float64 NumPy reference, as the stage
that ran the workload recorded it."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.store.records import BuildRecord, CaptureRecord


@dataclass(kw_only=True)
class Correctness(Part):
    """The case's largest absolute and relative error against the reference, the tolerance, and the verdict."""

    max_abs_error: float | None
    max_rel_error: float | None
    tolerance_rel: float | None
    correct: bool | None


def correctness(build: BuildRecord | None, capture: CaptureRecord | None) -> Correctness:
    """The case's output against the float64 NumPy reference, checked once where the workload ran
    (build.json on neuron and xla, capture.json on cpu): analysis/correctness.py."""
    record = next((r.details["correctness"] for r in (build, capture) if r and r.details.get("correctness")), None)
    values = {key: (record or {}).get(key) for key in Correctness.keys()}
    why = (record or {}).get("correct_why") or (None if record else "this case's output was not checked")
    notes: dict[str, str] = {}
    if why:
        notes["correct"] = why
    for key in Correctness.keys()[:3]:
        if values[key] is None:
            notes[key] = why or "not checked"
    return Correctness(**values, notes=notes)
