"""Interval union: busy time of work that overlaps (nested ops, pipelined instructions, DMA queues).

Columns in, numpy throughout: a trace's ops are up to millions of intervals."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def merge(starts: ArrayLike, ends: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Merge [start, end) intervals into disjoint sorted ones (touching ones join); empty and
    inverted intervals are dropped."""
    starts, ends = np.asarray(starts, np.float64), np.asarray(ends, np.float64)
    keep = ends > starts
    order = np.argsort(starts[keep], kind="stable")
    s, e = starts[keep][order], ends[keep][order]
    if not s.size:
        return s, e
    reach = np.maximum.accumulate(e)  # the furthest end so far
    first = np.ones(s.size, bool)
    first[1:] = s[1:] > reach[:-1]  # a gap before it: a new merged interval starts
    return s[first], np.maximum.reduceat(e, np.flatnonzero(first))


def shares(spans: list[tuple[int, int, str]]) -> tuple[dict[str, float], int]:
    """Per label the time its spans ran, an instant shared equally among the labels running in it (the
    engines of a NeuronCore or XLA's threads run ops of several categories at once); and the time covered
    by any span. Spans are (start, end, label) in integer units (ns); an empty one counts for nothing."""
    events = sorted([(s, 1, c) for s, e, c in spans if e > s] + [(e, -1, c) for s, e, c in spans if e > s])
    running: dict[str, int] = {}
    out: dict[str, float] = {}
    covered, last = 0, None
    for t, step, label in events:
        active = [c for c, n in running.items() if n > 0]
        if last is not None and active and t > last:
            for c in active:
                out[c] = out.get(c, 0.0) + (t - last) / len(active)
            covered += t - last
        running[label] = running.get(label, 0) + step
        last = t
    return out, covered


def union_length(starts: ArrayLike, ends: ArrayLike) -> float:
    """Total length covered by the intervals [starts, ends), overlaps counted once."""
    s, e = merge(starts, ends)
    return float((e - s).sum())


def covered_by(window: tuple[np.ndarray, np.ndarray], starts: ArrayLike, ends: ArrayLike) -> float:
    """Length of the intervals [starts, ends) (their union) inside `window` (merged, as `merge` returns):
    a window's DMA or engine activity, clipped to it."""
    s, e = merge(starts, ends)
    return float(inside_each(window, s, e).sum())


def inside_each(window: tuple[np.ndarray, np.ndarray], starts: ArrayLike, ends: ArrayLike) -> np.ndarray:
    """Each interval's length inside `window` (merged), one value per interval (overlapping intervals each
    count their own). Computed as the window's covered length up to each end minus up to each start, so it
    is one pass of searchsorted, not a loop of pairs."""
    w_start, w_end = window
    s, e = np.asarray(starts, np.float64), np.asarray(ends, np.float64)
    if not w_start.size:
        return np.zeros(s.size)
    before = np.concatenate([[0.0], np.cumsum(w_end - w_start)])  # window length before window i

    def upto(t: np.ndarray) -> np.ndarray:  # window length in (-inf, t]
        i = np.searchsorted(w_start, t, "right") - 1
        inside = np.clip(t - w_start[np.maximum(i, 0)], 0.0, (w_end - w_start)[np.maximum(i, 0)])
        return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0.0)

    return np.maximum(upto(e) - upto(s), 0.0)


def starts_inside(window: tuple[np.ndarray, np.ndarray], times: ArrayLike) -> np.ndarray:
    """Which of `times` fall in `window` (merged): the events a window counts (a DMA packet's bytes, an
    instruction's FLOPs) by where they start."""
    w_start, w_end = window
    t = np.asarray(times, np.float64)
    i = np.searchsorted(w_start, t, "right") - 1
    return (i >= 0) & (t < w_end[np.maximum(i, 0)]) if w_start.size else np.zeros(t.size, bool)
