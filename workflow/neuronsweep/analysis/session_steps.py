"""A server's profile session as steps, per rank: every execution the runtime made (`nrt_execute`, with the
NEFF it ran in `model_name`: the vLLM profiling tutorial), its time on the NeuronCore (the hardware's
`nc_exec_running`, the execution on the device: the glossary), the gap to the next one, and the ranks'
collectives (`cc_running`) on one timeline (analysis/rank_timeline.py).

What the docs leave open is decided here, said in `notes` and printed by `doctor --field-test --session`:
a worker is its events' `worker_gid` (the global NeuronCore id view-perfetto shows on each event), rank r the
r-th in order (vLLM's rank of a worker is not documented); a step's graph is its NEFF's `graph_<hash>` name
where the session's neffs/ has a file of the name model_name ends in (which bucket a graph is, is not
documented); the i-th nc_exec_running of a worker is its i-th nrt_execute's; the i-th cc_running of every
rank is one collective, and the ranks' clocks are aligned on their exits (how they relate is not
documented: the residual is said).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from neuronsweep.analysis import rank_timeline
from neuronsweep.analysis.rank_timeline import RankTimeline, Span

EXECUTE, ON_DEVICE, COLLECTIVE = "nrt_execute", "nc_exec_running", "cc_running"


@dataclass(frozen=True)
class Step:
    """One execution of a rank: its NEFF and graph, its start on the rank's clock, host and device time, and
    the gap before the rank's next step."""

    rank: int
    index: int
    model_name: str
    graph: str
    start_s: float
    host_s: float
    device_s: float | None
    gap_s: float | None


@dataclass(frozen=True)
class SessionSteps:
    """Every rank's steps, their device spans, their collectives and the timeline they make, with what was
    assumed or could not be read."""

    workers: tuple[int | str, ...]  # rank r's worker_gid (a process id where events carry none)
    steps: tuple[Step, ...]
    executions: tuple[tuple[Span, ...], ...]  # per rank: each step's span (on the device where known)
    collectives: tuple[tuple[Span, ...], ...]  # per rank, the i-th of every rank one collective
    timeline: RankTimeline | None
    notes: tuple[str, ...]

    def graphs(self) -> list[dict[str, object]]:
        """One row per kind of step (its graph): how many, the device time's median and sum, its share of the
        session's device time, the host time's median and the median gap after it."""
        device_total = sum(s.device_s for s in self.steps if s.device_s is not None)
        by: dict[str, list[Step]] = defaultdict(list)
        for s in self.steps:
            by[s.graph].append(s)
        rows = []
        for graph, steps in sorted(by.items(), key=lambda kv: -sum(s.device_s or 0.0 for s in kv[1])):
            device = [s.device_s for s in steps if s.device_s is not None]
            gaps = [s.gap_s for s in steps if s.gap_s is not None]
            rows.append(
                {
                    "graph": graph,
                    "steps": len(steps),
                    "ranks": len({s.rank for s in steps}),
                    "device_median_s": statistics.median(device) if device else None,
                    "device_total_s": sum(device) if device else None,
                    "device_share_pct": 100 * sum(device) / device_total if device and device_total else None,
                    "host_median_s": statistics.median(s.host_s for s in steps),
                    "gap_median_s": statistics.median(gaps) if gaps else None,
                }
            )
        return rows


def _args(raw: dict[str, Any]) -> dict[str, Any]:
    """A slice's arguments without the reader's `debug.` prefix (Perfetto's debug annotations)."""
    return {k.removeprefix("debug."): v for k, v in raw.items()}


def read(trace: Any, neff_names: set[str]) -> SessionSteps:
    """The steps of a system_profile.pftrace (`trace`: pftrace_reader.read's); `neff_names`: the session's
    neffs/ file names."""
    pid_of = {uuid: t.pid for uuid, t in trace.tracks.items()}
    events: dict[int | str, dict[str, list[tuple[int, int, dict[str, Any]]]]] = defaultdict(lambda: defaultdict(list))
    for s in trace.slices:
        if s.name not in (EXECUTE, ON_DEVICE, COLLECTIVE) or s.dur < 0:
            continue
        args = _args(s.args)
        worker = args.get("worker_gid")
        key = int(worker) if isinstance(worker, int) else f"pid {pid_of.get(s.track_uuid)}"
        events[key][s.name].append((s.ts, s.dur, args))
    notes: list[str] = []
    workers = tuple(sorted(events, key=lambda k: (isinstance(k, str), str(k) if isinstance(k, str) else k)))
    if any(isinstance(w, str) for w in workers):
        notes.append("some events carry no worker_gid: their worker is their process")
    notes.append(
        f"rank r is the r-th worker by worker_gid ({', '.join(map(str, workers))}): vLLM's rank of a worker is "
        "not documented"
    )
    steps, executions, collectives = [], [], []
    for rank, worker in enumerate(workers):
        runs = sorted(events[worker][EXECUTE], key=lambda e: e[0])
        device = sorted(events[worker][ON_DEVICE], key=lambda e: e[0])
        paired = len(device) == len(runs)
        if not paired:
            notes.append(
                f"rank {rank}: {len(runs)} {EXECUTE} and {len(device)} {ON_DEVICE}: its device times are left null"
            )
        spans = []
        for i, (ts, dur, args) in enumerate(runs):
            name = str(args.get("model_name") or args.get("device_profile") or "unknown")
            file = PurePosixPath(name).name
            graph = file.removesuffix(".neff") if file in neff_names else file
            on = device[i] if paired else None
            gap = (runs[i + 1][0] - (ts + dur)) * 1e-9 if i + 1 < len(runs) else None
            steps.append(Step(rank, i, name, graph, ts * 1e-9, dur * 1e-9, on[1] * 1e-9 if on else None, gap))
            start, length = (on[0], on[1]) if on else (ts, dur)
            spans.append((start * 1e-9, (start + length) * 1e-9))
        executions.append(tuple(spans))
        collectives.append(tuple((ts * 1e-9, (ts + dur) * 1e-9) for ts, dur, _ in sorted(events[worker][COLLECTIVE])))
    unmatched = sum(PurePosixPath(s.model_name).name not in neff_names for s in steps)
    if unmatched:
        notes.append(
            f"{unmatched} of {len(steps)} steps' model_name names no NEFF of the session's neffs/: their graph is "
            "the file name model_name ends in"
        )
    return SessionSteps(
        workers, tuple(steps), tuple(executions), tuple(collectives), _aligned(collectives, notes), tuple(notes)
    )


def _aligned(collectives: list[tuple[Span, ...]], notes: list[str]) -> RankTimeline | None:
    """The ranks' collectives on one timeline, the i-th of every rank one collective; None with a note where
    there are not two ranks with collectives."""
    counts = [len(c) for c in collectives]
    if len(collectives) < 2 or min(counts, default=0) == 0:
        notes.append(f"no skew: {len(collectives)} rank(s), {min(counts, default=0)} collective(s) on the fewest")
        return None
    n = min(counts)
    if len(set(counts)) > 1:
        notes.append(f"the ranks made {', '.join(map(str, counts))} collectives: the first {n} of each are aligned")
    timeline = rank_timeline.align([list(c[:n]) for c in collectives])
    notes.append(
        f"the ranks' clocks aligned on the exits of {n} collectives (how they relate is not documented): "
        f"offsets {', '.join(f'{o * 1e3:+.3f} ms' for o in timeline.offsets_s)}, residual "
        f"{timeline.residual_s * 1e6:.1f} us"
    )
    return timeline
