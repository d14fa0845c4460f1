"""The one rule for "is B different from A", used by the within-run ranking (ranking.py), by
`neuronsweep compare` (runs/compare.py) and by `neuronsweep history` (runs/history.py).

Judged on the timed samples of both sides (every sample of capture.json's latency, all rounds):

- a two-sided Mann-Whitney U test (SciPy): no assumption on the shape of a latency distribution,
  whose long right tail makes a t-test's mean the wrong summary;
- the p-values of one family (a run's cases in compare, one group in the ranking) are corrected with
  Holm's step-down method: the gate `--fail-on-regression` asks "did anything get slower", a
  family-wise question, and one false alarm fails somebody's release build. Holm bounds the chance of
  any false alarm (the family-wise error rate) under any dependence between the cases (they share one
  machine), and is never less powerful than Bonferroni; Benjamini-Hochberg bounds only the expected
  share of false alarms among the alarms, which is the wrong promise for a gate;
- and the change must reach a minimum effect (default 2 %): with thousands of samples any difference
  is "significant", and a 0.3 % shift is not a regression anyone acts on.

The change reported is the ratio of medians B / A with a 95 % bootstrap percentile interval (SciPy,
seeded: the same runs give the same interval). A side without samples (a profiled device time: one
execution, as every NKI case has), with fewer than MIN_SAMPLES samples (5 against 5 is the smallest
pair whose most extreme ordering reaches p < 0.05 with room for a correction), or flagged noisy is
not judged, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_SAMPLES = 5  # timed samples each side needs before the rank test can say anything
ALPHA = 0.05  # family-wise error rate after Holm's correction
MIN_EFFECT = 0.02  # smallest change of the median called slower or faster (--min-effect)
RESAMPLES = 2000  # bootstrap resamples for the interval of the ratio of medians

UNCHANGED, SMALL, SLOWER, FASTER, NOISY = (
    "unchanged (within noise)",
    "unchanged (below the minimum effect)",
    "slower",
    "faster",
    "noisy: not judged",
)
NO_SPREAD = "not judged (no spread: a single profiled execution)"


def flag(value) -> bool:
    """A boolean as a CSV or JSON gives it back (True, "True", "true", 1); NaN and None are False."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


@dataclass(frozen=True)
class Verdict:
    said: str
    beyond: bool = False  # slower or faster
    p_value: float | None = None  # the rank test's, before the correction
    p_adjusted: float | None = None  # Holm's, over the family
    ratio: float | None = None  # median B / median A
    ci_low: float | None = None  # 95 % bootstrap interval of that ratio
    ci_high: float | None = None
    n_a: int | None = None
    n_b: int | None = None

    @property
    def judged(self) -> bool:
        return not self.said.startswith(("not judged", "noisy"))


def unjudged(samples) -> str | None:
    """Why one side cannot be judged (None: it can)."""
    if samples is None:
        return NO_SPREAD
    if len(samples) < MIN_SAMPLES:
        return f"not judged ({len(samples)} samples)"
    return None


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given."""
    m = len(p_values)
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _ratio_of_medians(a, b, axis=-1):
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def _interval(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[float, float]:
    res = stats.bootstrap(
        (a, b),
        _ratio_of_medians,
        n_resamples=RESAMPLES,
        method="percentile",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def judge(pairs: list[tuple], min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> list[Verdict]:
    """One family of comparisons: pairs of (samples of A, samples of B, noisy), samples None for a
    time with no distribution. Returns a Verdict each, in order."""
    out: list[Verdict | None] = [None] * len(pairs)
    tested: list[tuple[int, float, float, tuple[float, float], int, int]] = []
    for i, (a, b, noisy) in enumerate(pairs):
        why = unjudged(a) or unjudged(b)
        if why or noisy:
            ratio = None
            if a is not None and b is not None and len(a) and len(b):
                ratio = float(np.median(b) / np.median(a))
            out[i] = Verdict(NOISY if noisy and not why else why, ratio=ratio, n_a=_len(a), n_b=_len(b))
            continue
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        p = float(stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
        tested.append((i, p, float(_ratio_of_medians(a, b)), _interval(a, b, seed=i), len(a), len(b)))
    for (i, p, ratio, (low, high), na, nb), adjusted in zip(tested, holm([t[1] for t in tested])):
        if adjusted >= alpha:
            said = UNCHANGED
        elif abs(ratio - 1) < min_effect:
            said = SMALL
        else:
            said = SLOWER if ratio > 1 else FASTER
        out[i] = Verdict(said, said in (SLOWER, FASTER), p, adjusted, ratio, low, high, na, nb)
    return out


def _len(samples) -> int | None:
    return None if samples is None else len(samples)
