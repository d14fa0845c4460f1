"""The one rule for "is B different from A", used by the within-run ranking (ranking.py) and by
`neuronsweep compare` (runs/compare.py), so the two cannot drift apart.

A difference is called out only beyond the larger measured spread of the two (max(IQR, range of round
medians), stats.latency_stats). A time with no spread is never judged: a profiled device time (one
execution, as every NKI case has) or fewer than MIN_SAMPLES timed samples (the IQR of one or two
samples is 0, and "any difference beyond zero noise" is no test). A case flagged noisy in either is
shown, not judged.
"""

from __future__ import annotations

import math

MIN_SAMPLES = 3  # timed samples each side needs before its spread means anything

UNCHANGED, SLOWER, FASTER, NOISY = "unchanged (within noise)", "slower", "faster", "noisy: not judged"


def flag(value) -> bool:
    """A boolean as a CSV or JSON gives it back (True, "True", "true", 1); NaN and None are False."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


def _count(n) -> int | None:
    try:
        n = float(n)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(n) else int(n)


def unjudged(spread, n) -> str | None:
    """Why a time cannot be judged (None: it can): no measured spread, or too few samples."""
    if spread is None or (isinstance(spread, float) and math.isnan(spread)):
        return "not judged (no spread: a single profiled execution)"
    count = _count(n)
    if count is not None and count < MIN_SAMPLES:
        return f"not judged ({count} samples)"
    return None


def judge(time_a: float, spread_a, n_a, time_b: float, spread_b, n_b, noisy: bool = False) -> tuple[str, bool]:
    """(verdict, beyond the noise) of B against A."""
    if noisy:
        return NOISY, False
    why = unjudged(spread_a, n_a) or unjudged(spread_b, n_b)
    if why:
        return why, False
    if abs(time_b - time_a) <= max(spread_a, spread_b):
        return UNCHANGED, False
    return (SLOWER if time_b > time_a else FASTER), True
