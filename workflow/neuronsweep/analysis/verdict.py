"""The one rule for "is B different from A", used by the within-run ranking (ranking.py), by
`neuronsweep compare` (runs/compare.py) and by `neuronsweep history` (runs/history.py).

A test needs independent units, and the unit of a timing is the process it ran in, not the sample:
on our 2-vCPU hosts a 55 us case's level moved 5-15 % from one process (one run) to the next while
its samples inside one agreed within a few percent, so a test on the samples of one process a side
called two runs of the same code different in 13 of 20 cases (docs/comparing-runs.md). Where the
program, the libraries and the heap land is drawn when a process starts (Mytkowicz et al., ASPLOS
2009); the process is the unit of replication (Kalibera and Jones, "Rigorous benchmarking in
reasonable time", ISMM 2013). So:

- a case is judged only where both sides timed at least MIN_ROUNDS rounds, each in a fresh process
  of its own (cpu `capture.rounds_in_processes`, the default; or `compare --interleaved N`, which
  times both sides again in turns). The test is a t-test on the logs of the round medians (Welch's,
  on trimmed means: below), the change the ratio of their trimmed geometric means with the test's
  95 % interval. A t-test because a rank test on 3 or 5 rounds a side cannot reach Holm's thresholds
  (its smallest p is 0.1 and 0.008);
- one process a side (samples without process rounds: a one-process capture, an NKI profile's
  executions) is `not judged`, with the ratio of medians and no p-value or interval: nothing in such
  a run can tell the code from the process;
- the p-values of one family (a run's cases in compare, one group in the ranking) are corrected with
  Holm's step-down method: the gate `--fail-on-regression` asks "did anything get slower", a
  family-wise question, and one false alarm fails somebody's release build. Holm bounds the chance of
  any false alarm under any dependence between the cases (they share one machine); Benjamini-Hochberg
  bounds only the expected share of false alarms among the alarms, the wrong promise for a gate;
- and the change must be shown past a minimum effect (default 2 %): a 0.3 % shift is not a
  regression anyone acts on, so "slower" says the test's interval lies wholly past 1 + min_effect (a
  minimum-effect test: the same t statistic against the shifted null |log ratio| <= log(1 + min_effect),
  Holm-corrected over the family as the first). A point estimate past it is not enough: an A/A pair
  of the default sweep called a +2.9 % (interval 1.014-1.043, Holm p 0.03) "slower" under that rule,
  the one false call of 84 untouched cases (docs/comparing-runs.md).

A side without samples (a profiled device time: one execution) is not judged either, with the reason.
Nor are two sides timed on different bases (an NKI kernel's device time per execution against a
framework's wall clock around a call, which holds the host's launch and sync): their ratio is no speed-up.

Rounds timed in the same processes as the other side's, in alternation (compare's, runs/interleave.py:
on our KVM hosts the machine's speed moves 20-40 % within seconds, which a process-to-process test
cannot tell from code) are paired: the test is then on each process's ratio B/A, trimmed the same
way (_paired).

A wide spread is not a veto: it decides what the test can show. The test is Yuen's trimmed t-test
(Yuen 1974; scipy's `ttest_ind(..., trim=0.2)`): the fastest and the slowest fifth of each side's
processes are left out of its mean and winsorized in its variance, so one process that landed on a
busy moment, a cold page cache or a frequency step moves neither the ratio nor its interval much (a
range of eight process medians is decided by its single worst one, and a rule "noisy when the range
passes 25 % of the median" tripped on more cases the more processes they had). Each test reports its
**minimum detectable change**: the smallest ratio its processes could have called different at
Holm's first step (alpha / the family's size), from their spread and count. Where a gate is given
(`--fail-on-regression PCT`) and a case is not called different while its minimum detectable change
is wider than the gate, it is not judged, saying so: "unchanged" would promise what the test could
not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from neuronsweep.store.records import Timing

MIN_ROUNDS = 3  # rounds in processes of their own each side needs before it is tested
ALPHA = 0.05  # family-wise error rate after Holm's correction
MIN_EFFECT = 0.02  # slower or faster only where the change is shown past it (--min-effect)
TRIM = 0.2  # the share of each side's processes trimmed at either end (Yuen's test; Wilcox's usual 20 %)

UNCHANGED, SMALL, SLOWER, FASTER = (
    "unchanged (within noise)",
    "unchanged (within the minimum effect)",
    "slower",
    "faster",
)
JUDGED = (UNCHANGED, SMALL, SLOWER, FASTER)  # the verdicts of a test made; every other one says why none was
BLIND = "not judged: could only show changes over"  # + the minimum detectable change, where it is past the gate
NO_SPREAD = "not judged (no spread: a single profiled execution)"
ONE_PROCESS = "not judged (one process a side: its samples test that process, not the code)"


def flag(value: object) -> bool:
    """A boolean as a CSV or JSON gives it back (True, "True", "true", 1); NaN and None are False."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


@dataclass(frozen=True)
class Verdict:
    """What compare, history and the search say of one difference: the sentence, whether it is beyond noise, and the
    test's figures behind it."""

    said: str
    beyond: bool = False  # slower or faster
    p_value: float | None = None  # the t-test's, before the correction
    p_adjusted: float | None = None  # Holm's, over the family
    ratio: float | None = None  # judged: geometric mean of B's round medians / A's; else median B / median A
    ci_low: float | None = None  # the t-test's 95 % interval of that ratio
    ci_high: float | None = None
    n_a: int | None = None  # units tested: samples, or processes
    n_b: int | None = None
    unit: str | None = None  # "samples" or "processes"
    detectable: float | None = None  # the minimum detectable change, as a ratio's distance from 1 (0.04: 4 %)

    @property
    def judged(self) -> bool:
        """Whether a test was made and could see the change that matters (not "not judged")."""
        return self.said in JUDGED

    def as_speedup(self) -> dict[str, str | float | None]:
        """B against A as B's speed-up (A's time over B's), with its 95 % interval turned the same way: what
        a search's finalists and a tune's winners record."""
        return {
            "said": self.said,
            "speedup": None if self.ratio is None else 1 / self.ratio,
            "speedup_low": None if self.ci_high is None else 1 / self.ci_high,
            "speedup_high": None if self.ci_low is None else 1 / self.ci_low,
        }


def as_timing(side: Timing | list[float] | None) -> Timing | None:
    """A side as a Timing: a plain list is samples without rounds."""
    return side if side is None or isinstance(side, Timing) else Timing(list(side))


def other_basis(a: Timing | list[float] | None, b: Timing | list[float] | None) -> str | None:
    """Why two sides timed on different bases cannot be judged (None: the same basis): an NKI kernel's
    samples are the profiler's device time of each execution, a framework's the wall clock around a call,
    which also holds the host's launch and synchronization, so their ratio is not a speed-up of either."""
    bases = [(side.basis or "wall clock") if isinstance(side, Timing) else "wall clock" for side in (a, b)]
    if bases[0] == bases[1]:
        return None
    return (
        f"not judged (timed on different bases: A's samples are {bases[0]}, B's {bases[1]}; "
        "neuron.latency_samples: device times both sides by device time)"
    )


def unjudged(side: Timing | None) -> str | None:
    """Why one side cannot be judged (None: it can): no samples, or fewer than MIN_ROUNDS processes."""
    if side is None:
        return NO_SPREAD
    rounds = len(side.rounds or ())
    if rounds == 0:
        return ONE_PROCESS
    if rounds < MIN_ROUNDS:
        return f"not judged ({rounds} processes a side; {MIN_ROUNDS} needed)"
    return None


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given."""
    m = len(p_values)
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def judge(
    pairs: list[tuple], min_effect: float = MIN_EFFECT, alpha: float = ALPHA, gate: float | None = None
) -> list[Verdict]:
    """One family of comparisons: pairs of (A, B), each side a Timing (a plain list: samples of one
    process), or None for a time with no distribution. Returns a Verdict each, in order; an unjudged
    one keeps the ratio of medians, without a p-value or an interval. `gate`: the change that matters
    (--fail-on-regression as a fraction); a case not called different whose minimum detectable change
    is wider than it is not judged (BLIND)."""
    out: list[Verdict | None] = [None] * len(pairs)
    tested: list[tuple] = []
    sides = [(as_timing(a), as_timing(b)) for a, b in pairs]
    first_step = alpha / max(  # Holm's
        1, sum(unjudged(a) is None and unjudged(b) is None and other_basis(a, b) is None for a, b in sides)
    )
    for i, (a, b) in enumerate(sides):
        why = [other_basis(a, b), unjudged(a), unjudged(b)]
        if any(why):
            ratio = None
            if a is not None and b is not None and len(a) and len(b):
                ratio = float(np.median(b.samples) / np.median(a.samples))
            said = next(w for w in (NO_SPREAD if NO_SPREAD in why else None, *why) if w)  # no spread first
            out[i] = Verdict(said, ratio=ratio, n_a=_units(a), n_b=_units(b), unit=_unit(a, b))
            continue
        assert a is not None and b is not None and a.rounds and b.rounds  # unjudged() said both have them
        paired = a.paired and b.paired and len(a.rounds) == len(b.rounds)
        test = _paired(a.rounds, b.rounds) if paired else _per_process(a.rounds, b.rounds)
        tested.append((i, test, len(a.rounds), len(b.rounds)))
    changed = holm([test.p(0.0) for _, test, _, _ in tested])
    past = holm([test.p(math.log1p(min_effect)) for _, test, _, _ in tested])
    for (i, test, na, nb), p_changed, p_past in zip(tested, changed, past):
        detectable = test.detectable(first_step)
        if p_changed >= alpha:
            said = UNCHANGED if gate is None or detectable <= gate else f"{BLIND} {100 * detectable:.0f} %"
        elif p_past >= alpha:
            said = SMALL
        else:
            said = SLOWER if test.centre > 0 else FASTER
        low, high = test.interval()
        out[i] = Verdict(
            said,
            said in (SLOWER, FASTER),
            test.p(0.0),
            p_changed,
            math.exp(test.centre),
            low,
            high,
            na,
            nb,
            "processes",
            detectable,
        )
    return [v for v in out if v is not None]  # every pair has its verdict by now


@dataclass(frozen=True)
class _Test:
    """A t-test on log ratios kept as its centre, standard error and degrees of freedom, so that one
    statistic answers "changed at all" (margin 0), "changed past the minimum effect" (margin
    log(1 + min_effect)) and "what could it have shown" (the minimum detectable change)."""

    centre: float  # the log of the ratio B / A
    standard_error: float  # 0: no spread on either side
    df: float

    def p(self, margin: float) -> float:
        """Two-sided p of the null |log ratio| <= margin: below 0.05 exactly where the 95 % interval
        lies wholly past exp(+-margin); with margin 0, the t-test's own p-value. No spread: 0 where the
        change is past the margin, else 1."""
        beyond = abs(self.centre) - margin
        if self.standard_error == 0:
            return 0.0 if beyond > 0 or (beyond == 0 and margin > 0) else 1.0
        from scipy import stats  # here, not at import: every sweep's history reads this module, few runs test

        return min(1.0, float(2 * stats.t.sf(beyond / self.standard_error, self.df)))

    def interval(self) -> tuple[float, float]:
        """The 95 % interval of the ratio B / A."""
        return self._around(ALPHA)

    def detectable(self, first_step: float) -> float:
        """The smallest change a test at `first_step` (Holm's) could have called different, as a
        ratio's distance from 1 (0.04: 4 %)."""
        return self._around(first_step)[1] / math.exp(self.centre) - 1

    def _around(self, level: float) -> tuple[float, float]:
        if self.standard_error == 0:
            return math.exp(self.centre), math.exp(self.centre)
        from scipy import stats

        half = float(stats.t.ppf(1 - level / 2, self.df)) * self.standard_error
        return math.exp(self.centre - half), math.exp(self.centre + half)


def _per_process(a: list[float], b: list[float]) -> _Test:
    """Yuen's trimmed t-test on the logs of the round medians (scipy's `ttest_ind(..., trim=0.2)`,
    Welch's degrees of freedom): the difference of the trimmed means and its standard error."""
    la, lb = np.log(a), np.log(b)
    if la.var() == 0 and lb.var() == 0:
        return _Test(float(lb.mean() - la.mean()), 0.0, 1.0)
    from scipy import stats

    res = stats.ttest_ind(lb, la, equal_var=False, trim=TRIM)
    ci = res.confidence_interval(1 - ALPHA)
    standard_error = (ci.high - ci.low) / (2 * stats.t.ppf(1 - ALPHA / 2, res.df))
    return _Test(float((ci.low + ci.high) / 2), float(standard_error), float(res.df))


def _paired(a: list[float], b: list[float]) -> _Test:
    """The same for paired rounds (both sides timed in each process, in alternation): the trimmed
    one-sample t-test (Tukey and McLaughlin 1963) on each process's log ratio log(b_i / a_i), 20 %
    trimmed at either end, its variance winsorized. The moment each process ran in cancels in its
    ratio, so what is left is the programs' difference and the process's own."""
    from scipy import stats
    from scipy.stats import mstats

    d = np.log(np.asarray(b) / np.asarray(a))
    n, cut = len(d), int(TRIM * len(d))
    kept = n - 2 * cut
    centre = float(stats.trim_mean(d, TRIM))
    spread = float(np.asarray(mstats.winsorize(d, limits=(TRIM, TRIM))).std(ddof=1))
    if spread == 0 or kept < 2:
        return _Test(centre, 0.0, 1.0)
    return _Test(centre, spread * math.sqrt(n) / kept, kept - 1)


def fails_gate(said: str, ci_low: object, pct: float) -> bool:
    """The regression gate (--fail-on-regression PCT of compare and history): judged slower, and the
    95 % interval of the ratio lies wholly above 1 + PCT/100. That is a test of "slower by more than
    PCT" (a margin, as in non-inferiority testing), where a point estimate past PCT is not: a run's
    level drifts a few percent with the machine's moment (docs/comparing-runs.md), and a gate on
    the point estimate failed A/A pairs that drifted 5.1-5.9 %."""
    try:
        return said == SLOWER and float(ci_low) > 1 + pct / 100  # type: ignore[arg-type]  # text, None: raise below
    except (TypeError, ValueError):
        return False


def _units(side: Timing | None) -> int | None:
    """What a side has to test: its processes where it has them, else its samples."""
    return None if side is None else len(side.rounds or ()) or len(side)


def _unit(a: Timing | None, b: Timing | None) -> str | None:
    if a is None or b is None:
        return None
    return "processes" if a.rounds and b.rounds else "samples"
