"""Interval union: busy time of work that overlaps (nested ops, pipelined instructions, DMA queues).

Columns in, numpy throughout: a trace's ops are up to millions of intervals."""

from __future__ import annotations

import numpy as np


def merge(starts, ends) -> tuple[np.ndarray, np.ndarray]:
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


def union_length(starts, ends) -> float:
    """Total length covered by the intervals [starts, ends), overlaps counted once."""
    s, e = merge(starts, ends)
    return float((e - s).sum())
