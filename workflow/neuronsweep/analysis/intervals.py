"""Interval union: busy time of work that overlaps (nested ops, pipelined instructions, DMA queues)."""

from __future__ import annotations

from collections.abc import Iterable


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge [start, end) intervals into disjoint sorted ones; empty and inverted intervals are dropped."""
    merged: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(e - s for s, e in merge(intervals))
