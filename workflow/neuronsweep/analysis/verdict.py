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

Where both sides timed each round in a fresh process of its own (cpu, capture.rounds_in_processes)
the unit tested is the process, not the sample: a Welch t-test on the logs of the round medians,
with its interval of the ratio of geometric means. The samples of one process test that process,
not the code: on our 2-vCPU hosts a 55 us case's level moved 5-15 % from one process (one run) to
the next while its samples inside one agreed within a few percent, so a rank test on the samples
called two runs of the same code different in 13 of 20 cases. The process as the unit of
replication is Kalibera and Jones's rule ("Rigorous benchmarking in reasonable time", ISMM 2013); a
t-test because a rank test on 3 or 5 rounds a side cannot reach Holm's thresholds (its smallest p is
0.1 and 0.008), and a slow outlier process widens its interval (fewer calls, never more). At least
MIN_ROUNDS rounds a side, else the samples are tested.

On the samples, the change reported is the ratio of medians B / A with a 95 % bootstrap percentile
interval (SciPy, seeded: the same runs give the same interval). A side without samples (a profiled device time: one
execution, as every NKI case has), with fewer than MIN_SAMPLES samples (5 against 5 is the smallest
pair whose most extreme ordering reaches p < 0.05 with room for a correction), or flagged noisy is
not judged, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from neuronsweep.store.records import Timing

MIN_SAMPLES = 5  # timed samples each side needs before the rank test can say anything
MIN_ROUNDS = 3  # rounds in processes of their own each side needs to be tested per process
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
    n_a: int | None = None  # units tested: samples, or processes
    n_b: int | None = None
    unit: str | None = None  # "samples" or "processes"

    @property
    def judged(self) -> bool:
        return not self.said.startswith(("not judged", "noisy"))


def as_timing(side) -> Timing | None:
    """A side as a Timing: a plain list is samples without rounds."""
    return side if side is None or isinstance(side, Timing) else Timing(list(side))


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
    """One family of comparisons: pairs of (A, B, noisy), each side a Timing or a list of samples, or
    None for a time with no distribution. Returns a Verdict each, in order."""
    out: list[Verdict | None] = [None] * len(pairs)
    tested: list[tuple] = []
    for i, (a, b, noisy) in enumerate(pairs):
        a, b = as_timing(a), as_timing(b)
        why = unjudged(a) or unjudged(b)
        if why or noisy:
            ratio = None
            if a is not None and b is not None and len(a) and len(b):
                ratio = float(np.median(b.samples) / np.median(a.samples))
            out[i] = Verdict(NOISY if noisy and not why else why, ratio=ratio, n_a=_len(a), n_b=_len(b))
            continue
        if min(len(a.rounds or ()), len(b.rounds or ())) >= MIN_ROUNDS:
            tested.append((i, *_per_process(a.rounds, b.rounds), len(a.rounds), len(b.rounds), "processes"))
            continue
        x, y = np.asarray(a.samples, dtype=float), np.asarray(b.samples, dtype=float)
        p = float(stats.mannwhitneyu(y, x, alternative="two-sided").pvalue)
        tested.append((i, p, float(_ratio_of_medians(x, y)), _interval(x, y, seed=i), len(x), len(y), "samples"))
    for (i, p, ratio, (low, high), na, nb, unit), adjusted in zip(tested, holm([t[1] for t in tested])):
        if adjusted >= alpha:
            said = UNCHANGED
        elif abs(ratio - 1) < min_effect:
            said = SMALL
        else:
            said = SLOWER if ratio > 1 else FASTER
        out[i] = Verdict(said, said in (SLOWER, FASTER), p, adjusted, ratio, low, high, na, nb, unit)
    return out


def _per_process(a: list[float], b: list[float]) -> tuple[float, float, tuple[float, float]]:
    """Welch's t-test on the logs of the round medians: (p, ratio of geometric means B / A, its 95 %
    interval). Rounds without any spread on either side: p 1 if the sides are equal, else 0."""
    la, lb = np.log(a), np.log(b)
    diff = float(lb.mean() - la.mean())
    if la.var() == 0 and lb.var() == 0:
        return (1.0 if diff == 0 else 0.0), math.exp(diff), (math.exp(diff), math.exp(diff))
    res = stats.ttest_ind(lb, la, equal_var=False)
    ci = res.confidence_interval(1 - ALPHA)
    return float(res.pvalue), math.exp(diff), (math.exp(ci.low), math.exp(ci.high))


def fails_gate(said: str, ci_low, pct: float) -> bool:
    """The regression gate (--fail-on-regression PCT of compare and history): judged slower, and the
    95 % interval of the ratio lies wholly above 1 + PCT/100. That is a test of "slower by more than
    PCT" (a margin, as in non-inferiority testing), where a point estimate past PCT is not: a run's
    level drifts a few percent with the machine's moment (docs/comparing-runs.md), and a gate on
    the point estimate failed A/A pairs that drifted 5.1-5.9 %."""
    try:
        return said == SLOWER and float(ci_low) > 1 + pct / 100
    except (TypeError, ValueError):
        return False


def _len(samples) -> int | None:
    return None if samples is None else len(samples)
