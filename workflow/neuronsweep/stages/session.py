"""`neuronsweep session DIR`: a vLLM Neuron server's profile session (its profiler's output_dir) read the way a
neuron-sweep case is: every rank viewed with Neuron Explorer (backends/server_session.py), each execution a
step with its NEFF, graph, device time and the gap after it, the ranks' skew at their collectives, one
merged timeline (analysis/session_steps.py), and each kind of step's headroom from every worker's device
profile viewed as Parquet (analysis/session_headroom.py). What the session lacks is a sentence each and the
rest is read; what the docs leave open is said beside the figures (`notes`) and printed by
`doctor --field-test --session`.

Writes into OUT: steps.csv (a row per step and rank), graphs.csv (a row per kind of step, with its bounds
ladder's figures per execution), rank_waits.csv
(each collective's arrival and wait per rank), ranks.pftrace (a process per rank: its steps and its
collectives, on rank 0's clock), session.json (all of it summed up), and view/ (Neuron Explorer's own
system_profile.pftrace and device profiles), devices/<worker>/view/parquet (each worker's device profile).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from neuronsweep.analysis import rank_timeline, session_headroom, session_steps
from neuronsweep.analysis.metrics.peaks import neuron_peaks
from neuronsweep.atomic import replacing, write_json
from neuronsweep.backends import server_session
from neuronsweep.errors import UserError
from neuronsweep.formats import pftrace_reader, pftrace_writer, vllm_session
from neuronsweep.stages import extract


def run(root: Path, out: Path, profiler: str = "auto", timeout_s: float = 1800) -> dict:
    """Read the session under `root` into `out`; returns session.json's content."""
    out.mkdir(parents=True, exist_ok=True)
    session = vllm_session.read(root)
    seen = server_session.view(session, out, profiler, timeout_s)
    found = session_steps.read(pftrace_reader.read(seen.system), set(session.neffs))
    steps = pd.DataFrame([vars(s) for s in found.steps])
    headroom, headroom_why, clocks = step_headroom(session, out, profiler, timeout_s)
    graphs = [g | (headroom[g["graph"]].figures if g["graph"] in headroom else {}) for g in found.graphs()]
    stray = sorted(set(headroom) - {g["graph"] for g in graphs})
    if stray:  # ExecutionInfo's NEFF names and the runtime's model_name disagree: said, kept in session.json
        said = f"the device profiles' executions ran {', '.join(stray)}, which no step of the system trace names"
        headroom_why = f"{headroom_why}; {said}" if headroom_why else said
    for name, table in (("steps.csv", steps), ("graphs.csv", pd.DataFrame(graphs))):
        with replacing(out / name) as tmp:
            table.to_csv(tmp, index=False)
    timeline = found.timeline
    if timeline:
        with replacing(out / "rank_waits.csv") as tmp:
            pd.DataFrame(timeline.rows()).to_csv(tmp, index=False)
    names = [[s.graph for s in found.steps if s.rank == r] for r in range(len(found.workers))]
    calls = [session_steps.COLLECTIVE] * max((len(c) for c in found.collectives), default=0)
    events = rank_timeline.chrome_trace(
        [list(c) for c in found.collectives],
        timeline,
        "step",
        calls,
        [list(e) for e in found.executions],
        names,
        "steps",
    )
    pftrace_writer.chrome_to_pftrace(events, out / "ranks.pftrace")
    summary = {
        "session": str(root),
        "workers": [
            {"name": w.name, "instance": w.instance, "pid": w.pid, "session": w.folder.name, "viewed": w.system_trace}
            for w in session.workers
        ],
        "ranks": [{"rank": r, "worker_gid": g} for r, g in enumerate(found.workers)],
        "steps": len(found.steps),
        "graphs": graphs,
        "straggler_rank": timeline.straggler_rank if timeline else None,
        "rank_wait_max_s": timeline.rank_wait_max_s if timeline else None,
        "collective_wait_pct": timeline.collective_wait_pct if timeline else None,
        "clock_residual_s": timeline.residual_s if timeline else None,
        "headroom": {g: {"executions": h.executions, **h.figures, "notes": h.notes} for g, h in headroom.items()}
        or None,
        "headroom_why": headroom_why,
        "instructions_in_executions_pct": clocks,
        "missing": list(session.missing) + ([seen.devices_missing] if seen.devices_missing else []),
        "notes": list(found.notes),
        "view": {"argv": list(seen.argv), "system": str(seen.system), "devices": [str(d) for d in seen.devices]},
    }
    write_json(out / "session.json", summary)
    return summary


def step_headroom(
    session: vllm_session.Session, out: Path, profiler: str, timeout_s: float
) -> tuple[dict[str, session_headroom.StepHeadroom], str | None, dict[str, float | None]]:
    """Each kind of step's bounds ladder over every worker's executions of it (analysis/session_headroom.py),
    from each worker's device profile viewed as Parquet; why a worker, or all, were left out; and per worker the
    share of its instructions inside its executions' time ranges (the clock the ladder assumes)."""
    workers = []
    why = []
    clocks: dict[str, float | None] = {}
    for device in server_session.view_devices(session, out, profiler, timeout_s):
        if device.view is None:
            why.append(f"{device.worker}: {device.why}")
            continue
        try:
            db = extract.view_db(device.view)
            metadata = extract.profile_metadata(db, device.view / "parquet") if db is not None else None
        except UserError as exc:  # a damaged table: this worker's sentence, the others are read
            why.append(f"{device.worker}: {exc}")
            continue
        if db is None:
            why.append(f"{device.worker}: its view holds no tables")
            continue
        notes: dict[str, str] = {}
        peaks = neuron_peaks(None, {"instance_type": (metadata or {}).get("instance_type")}, metadata, notes)
        workers.append((device.worker, db, peaks))
        clocks[device.worker] = session_headroom.inside_share(db)
    found, left_out = session_headroom.per_graph(workers)
    why += left_out
    return {h.graph: h for h in found}, "; ".join(why) or None, clocks


def lines(summary: dict, out: Path) -> list[str]:
    """What `neuronsweep session` prints: the ranks, each kind of step, the skew, what is missing and assumed."""
    said = [f"{len(summary['ranks'])} rank(s), {summary['steps']} step(s) ({summary['session']})"]
    for g in summary["graphs"]:
        median = g["device_median_s"]
        device = f"{median * 1e6:,.1f} us on the device (median)" if median is not None else "device time unknown"
        share = f", {g['device_share_pct']:.0f} % of the device time" if g["device_share_pct"] is not None else ""
        said.append(f"  {g['graph']}: {g['steps']} step(s), {device}{share}")
    if summary["straggler_rank"] is not None:
        said.append(
            f"collectives: rank {summary['straggler_rank']} arrives last most often; the longest wait "
            f"{summary['rank_wait_max_s'] * 1e6:,.1f} us, {summary['collective_wait_pct']:.0f} % of the time in "
            "collectives spent waiting"
        )
    said += [f"missing: {m}" for m in summary["missing"]] + [f"assumed: {n}" for n in summary["notes"]]
    for graph, h in (summary["headroom"] or {}).items():
        speedups = ", ".join(
            f"x{h[k]:.3g} {label}"
            for k, label in (
                ("speedup_if_memory_ideal", "if memory were ideal"),
                ("speedup_if_compute_ideal", "if compute were ideal"),
                ("speedup_if_pipelined", "if pipelined"),
            )
            if h.get(k) is not None
        )
        said.append(f"  headroom of {graph}: {h.get('bottleneck_engine') or 'no'} bottleneck; {speedups or 'none'}")
    if summary["headroom_why"]:
        said.append(f"headroom left out: {summary['headroom_why']}")
    said.append(
        f"wrote {out}/: steps.csv, graphs.csv, ranks.pftrace, session.json; neuronsweep query {out}/ranks.pftrace "
        "reads the timeline"
    )
    return said
