"""The ranks of a collective on one timeline: each rank's clock aligned on the collectives' exits, and per
instance each rank's arrival, its wait and the straggler.

Every rank leaves a collective together (none returns before the last has arrived and the data has moved),
so where two ranks' clocks differ, the difference of their exit times is the offset between the clocks:
each rank's offset to rank 0 is the median over the instances of rank 0's exit minus its own, and what is
left after the shift (the largest exit still apart from rank 0's) is the residual, said beside every figure.
After the shift a rank's arrival is its own entry; the last arrival is when the collective can start
moving data, so a rank's wait is the last arrival minus its own, and the straggler is the rank that
arrived last most often. The time in collectives is each rank's entry to exit; the share of it spent
waiting is the waits over that time.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

Span = tuple[float, float]  # (entry, exit) in seconds, on the rank's own clock


@dataclass(frozen=True)
class RankTimeline:
    """The ranks' spans of the same collective instances, aligned: offsets and residual, each instance's
    arrivals and waits, the straggler, the largest wait and the share of the collectives' time waited."""

    offsets_s: tuple[float, ...]  # added to each rank's clock to put it on rank 0's
    residual_s: float  # the largest exit still apart from rank 0's after the shift
    arrivals_s: tuple[tuple[float, ...], ...]  # per instance, per rank, on rank 0's clock
    waits_s: tuple[tuple[float, ...], ...]  # per instance, per rank: the last arrival minus its own
    straggler_rank: int  # the rank that arrived last in most instances (the lowest on a tie)
    rank_wait_max_s: float
    collective_wait_pct: float  # the waits over the ranks' time inside the collectives

    def rows(self) -> list[dict]:
        """tables/rank_waits.csv: one row per instance and rank."""
        return [
            {"instance": i, "rank": r, "arrival_s": a, "wait_s": w, "last": w == 0.0}
            for i, (arrivals, waits) in enumerate(zip(self.arrivals_s, self.waits_s))
            for r, (a, w) in enumerate(zip(arrivals, waits))
        ]


def align(spans: list[list[Span]]) -> RankTimeline:
    """`spans[r][i]`: rank r's entry and exit of instance i (every rank the same instances, in order)."""
    ranks, instances = len(spans), len(spans[0])
    if ranks < 2 or instances < 1 or any(len(s) != instances for s in spans):
        raise ValueError(f"align needs every one of 2 or more ranks to have the same instances: {ranks} ranks")
    offsets = tuple(statistics.median(spans[0][i][1] - spans[r][i][1] for i in range(instances)) for r in range(ranks))
    residual = max(abs(spans[0][i][1] - (spans[r][i][1] + offsets[r])) for r in range(ranks) for i in range(instances))
    arrivals = tuple(tuple(spans[r][i][0] + offsets[r] for r in range(ranks)) for i in range(instances))
    waits = tuple(tuple(max(a) - x for x in a) for a in arrivals)
    last = Counter(max(range(ranks), key=lambda r: (a[r], -r)) for a in arrivals)
    inside = sum(end - start for rank in spans for start, end in rank)
    return RankTimeline(
        offsets_s=offsets,
        residual_s=residual,
        arrivals_s=arrivals,
        waits_s=waits,
        straggler_rank=min(r for r, n in last.items() if n == max(last.values())),
        rank_wait_max_s=max(max(w) for w in waits),
        collective_wait_pct=100 * sum(sum(w) for w in waits) / inside if inside > 0 else 0.0,
    )


def chrome_trace(
    spans: list[list[Span]],
    timeline: RankTimeline | None,
    name: str,
    names: list[str] | None = None,
    executions: list[list[Span]] | None = None,
    execution_names: list[list[str]] | None = None,
    track: str = "forward",
) -> list[dict]:
    """The ranks' spans as Chrome trace events on rank 0's clock (each rank's as it is, without a
    `timeline`): one process per rank, a slice per instance with its wait (named `names[i]`, else `name`),
    and each rank's `executions` (a forward's or a server's steps, each holding its collectives; named
    `execution_names[r][e]`, else `name`) on a thread above them, named `track`; what chrome_to_pftrace turns into
    ranks.pftrace. A thread id is unique across the ranks (2r, 2r + 1), as Perfetto's thread ids are across
    processes."""
    events: list[dict] = []
    for r, rank in enumerate(spans):
        outer, inner = 2 * r, 2 * r + 1
        offset = timeline.offsets_s[r] if timeline else 0.0
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": inner, "args": {"name": f"rank {r}"}})
        if executions:
            events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": outer, "args": {"name": track}})
            events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": inner, "args": {"name": "collectives"}})
            for e, (start, end) in enumerate(executions[r]):
                label = execution_names[r][e] if execution_names else name
                at = {"ph": "X", "name": label, "pid": r, "tid": outer, "ts": (start + offset) * 1e6}
                events.append(at | {"dur": (end - start) * 1e6, "args": {"execution": e}})
        for i, (start, end) in enumerate(rank):
            args: dict[str, float] = {"instance": i}
            if timeline:
                args["wait_us"] = round(timeline.waits_s[i][r] * 1e6, 3)
            at = {"ph": "X", "name": names[i] if names else name, "pid": r, "tid": inner, "ts": (start + offset) * 1e6}
            events.append(at | {"dur": (end - start) * 1e6, "args": args})
    return events
