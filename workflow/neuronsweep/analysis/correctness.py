"""Correct before fast: a case's output against a float64 NumPy reference of the same workload on the
same inputs, once per case, where the workload already runs (the build on neuron and xla, the
capture on cpu), so no extra device time is spent.

The error is normwise: max |out - ref| over max |ref|, which a zero in the reference cannot blow up.
The tolerance is the compute precision's (docs/metrics.md): the inputs the reference gets are the
ones the case got (already rounded to its dtype), so what is left is accumulation and the output's
own rounding; under neuron auto-cast the cast type's tolerance applies, since casting is the point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from neuronsweep.store.specs import Spec
from neuronsweep.workloads import (
    NotComparable,
    checked_whole,
    collective_of,
    described,
    dtype_of,
    has_reference,
    output_array,
    reference,
    row_input,
)

if TYPE_CHECKING:
    import numpy as np

Array = Any  # a NumPy array or a torch tensor of any dtype

# max normwise relative error per compute dtype: fp32 keeps ~1e-7 per operation, so 1e-4 leaves room
# for long sums; bf16 and fp16 round the output alone to 2^-9 and 2^-11, and the MLP rounds its
# intermediate too.
TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}


class Correctness(TypedDict):
    """A case's correctness record (build.json or capture.json's `correctness`, metrics.json's `correct`)."""

    correct: bool | None  # None: not checked, with why
    correct_why: NotRequired[str]
    max_abs_error: NotRequired[float | None]
    max_rel_error: NotRequired[float | None]  # normwise: max |out - ref| / max |ref|
    tolerance_rel: NotRequired[float]
    tolerance_for: NotRequired[str]  # the precision the tolerance is for
    reference: NotRequired[str]  # what the output was compared with
    rows_checked: NotRequired[int]  # a large case: the rows spread over its output that were
    rows: NotRequired[int]
    rank: NotRequired[int]  # a collective's rank


def tolerance(dtype: str, auto_cast: str | None = None) -> tuple[float, str]:
    """(tolerance, the precision it is for). neuronx-cc's --auto-cast matmult|all casts fp32 to its
    --auto-cast-type, bf16 unless given, which we never pass."""
    if auto_cast in ("matmult", "all") and dtype == "fp32":
        return TOLERANCE["bf16"], f"bf16 (--auto-cast {auto_cast})"
    return TOLERANCE[dtype], dtype


def rejudge(record: Correctness | None, dtype: str, auto_cast: str | None) -> Correctness | None:
    """A child's check (judged at the workload's dtype) at the precision the compile really used."""
    if not record or record.get("max_rel_error") is None:
        return record
    tol, precision = tolerance(dtype, auto_cast)
    rel = record["max_rel_error"]
    return {**record, "tolerance_rel": tol, "tolerance_for": precision, "correct": rel is not None and rel <= tol}


MAX_ROWS = 512  # output rows checked: spread over the whole output, so every 128-row tile up to 64k rows


def check(spec: Spec, inputs: dict[str, Array], output: Array) -> Correctness:
    """The correctness record: errors, tolerance and verdict, or why the case is not checked.
    `inputs` and `output` are array-likes (NumPy, or torch tensors of any dtype). Output row i depends
    only on row i of the kind's ROW_INPUT, so a large case is checked on MAX_ROWS rows spread evenly over
    it (an LLM prefill's float64 reference would otherwise take gigabytes and a minute)."""
    import numpy as np

    if not has_reference(spec):
        return {"correct": None, "correct_why": f"no NumPy reference for {described(spec).name} workloads"}
    if checked_whole(spec):  # a user's function or a model's part: its whole output, against itself in float64
        return _check_whole(spec, inputs, output)
    rows = len(output)
    picked = np.unique(np.linspace(0, rows - 1, min(rows, MAX_ROWS)).round().astype(int)).tolist()
    sampled = {name: a[picked] if name == row_input(spec) else a for name, a in inputs.items()}
    ref = reference(spec, {name: _f64(a) for name, a in sampled.items()})
    if ref is None:
        return {"correct": None, "correct_why": "the workload changes its result between calls on purpose"}
    record = compare(dtype_of(spec), ref, output[picked] if len(picked) < rows else output)
    return record | ({"rows_checked": len(picked), "rows": rows} if len(picked) < rows else {})


def _check_whole(spec: Spec, inputs: dict[str, Array], output: Array) -> Correctness:
    try:
        out = output_array(spec, output)
    except NotComparable as exc:
        return {"correct": None, "correct_why": str(exc)}
    try:
        ref = reference(spec, {name: _f64(a) for name, a in inputs.items()})
    except NotComparable as exc:
        return {"correct": None, "correct_why": f"in float64: {exc}"}
    except Exception as exc:  # noqa: BLE001 - the user's code: its failure in float64 is a finding, not a crash
        return {"correct": None, "correct_why": f"the function did not run in float64 on the CPU: {exc!r}"[:300]}
    return compare(dtype_of(spec), ref, out) | {"reference": "the function itself in float64 on the CPU, same inputs"}


def check_rank(spec: Spec, rank: int, output: Array) -> Correctness:
    """A collective's rank: its output after the collective of every rank's Op.rank_input."""
    return {"rank": rank, **compare(dtype_of(spec), collective_of(spec).rank_reference(rank), output)}


def worst(records: list[Correctness]) -> Correctness:
    """One verdict for the ranks of a collective: the worst rank's record, wrong if any rank is."""
    if not records:
        return {"correct": None, "correct_why": "no rank recorded its check"}
    return max(records, key=lambda r: (r["correct"] is False, r.get("max_rel_error") or 0.0))


def compare(dtype: str, ref: Array, output: Array) -> Correctness:
    """The normwise comparison of an output with its float64 reference, at `dtype`'s tolerance."""
    import numpy as np

    out = _f64(output)
    tol = tolerance(dtype)
    if out.shape != ref.shape:
        return _verdict(None, None, *tol) | {
            "correct_why": f"output shape {out.shape} is not the reference's {ref.shape}"
        }
    if not np.isfinite(out).all():
        return _verdict(None, None, *tol) | {"correct_why": "the output holds NaN or Inf where the reference is finite"}
    abs_err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return _verdict(abs_err, abs_err / scale if scale else abs_err, *tol)


def _verdict(abs_err: float | None, rel_err: float | None, tol: float, precision: str) -> Correctness:
    """None errors: the output could not be compared at all (wrong shape, NaN): wrong."""
    return {
        "max_abs_error": abs_err,
        "max_rel_error": rel_err,
        "tolerance_rel": tol,
        "tolerance_for": precision,
        "reference": "float64 NumPy, same inputs",
        "correct": rel_err is not None and rel_err <= tol,
    }


def _f64(a: Array) -> np.ndarray:
    import numpy as np

    if hasattr(a, "detach"):  # a torch tensor (bf16 has no NumPy dtype)
        a = a.detach().to("cpu").double().numpy()
    return np.asarray(a, dtype=np.float64)
