"""Stand-in for what a vLLM Neuron server's profiler leaves on disk after `/stop_profile` (a test double: see
README.md), in the documented layout (vLLM Neuron's neuron-profiling design and how-to-profile-workloads):

    output_dir/
      i-<instance_id>_pid_<pid>/<timestamp>/
        profile_nc_0_session_0.ntff   # the worker's device trace, SESSION mode: every execution in one NTFF
        ntrace.pb                     # the runtime's system trace
        trace_info.pb                 # its metadata
      neffs/graph_<hash>.neff         # copied from the compile cache

One `pid` folder per profiled worker (the design doc shows one rank; a folder per process is how the layout
reads with several). Each worker sees its own core as NeuronCore 0 (the fork passes no core list to NRT), so
every NTFF is `profile_nc_0_session_0.ntff`. The .pb and .ntff contents are this stand-in's own (JSON after a
magic word): only neuron-explorer's stand-in reads them, as only Neuron Explorer reads the real ones.

What the docs leave open is chosen here and named, so the field test can settle it: the runtime's
`nrt_execute` `model_name` ends in the NEFF's `graph_<hash>.neff` name; a worker's `worker_gid` is its rank;
the ranks' clocks differ by `clock_offsets_s`. The NTFF records each execution's NEFF and time range from the
profile's start (`timeline`), from which the Neuron Explorer stand-in writes the ExecutionInfo table.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

INSTANCE = "0a1b2c3d4e5f60718"
TIMESTAMP = "20261205_011500"


def neff_bytes(graph: str, m: int) -> bytes:
    """A NEFF of the stand-in toolchain: one m x 256 x 256 matmul, named for its graph."""
    return b"NEFF\0" + json.dumps({"graph": graph, "ops": [["matmul", [[m, 256], [256, 256]]]]}).encode()


def write(
    root: Path,
    steps: list[tuple[str, float]],
    ranks: int = 2,
    collectives_per_step: int = 2,
    late_rank: int = 1,
    late_s: float = 40e-6,
    clock_offsets_s: tuple[float, ...] = (0.0, 0.0025),
    gap_s: float = 30e-6,
) -> dict:
    """A session of `steps` (graph, device seconds) on `ranks` workers; in every step `late_rank` reaches each
    collective `late_s` after the others, and every rank leaves it together. Returns what was written."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "neffs").mkdir(exist_ok=True)
    graphs: dict[str, dict] = {}
    for graph, _ in steps:
        if graph not in graphs:
            data = neff_bytes(graph, 128 if "prefill" in graph else 8)
            digest = hashlib.sha256(data).hexdigest()
            name = f"graph_{digest[:20]}.neff"
            (root / "neffs" / name).write_bytes(data)
            graphs[graph] = {"sha256": digest, "file": name, "model_id": int(digest[:8], 16)}
    events: list[list[dict]] = [[] for _ in range(ranks)]
    timeline: list[list] = []  # each device execution: its NEFF, start and end in ns from the profile's start
    t = 0.001
    for graph, device_s in steps:
        start, share = t, device_s / (collectives_per_step + 1)
        at = start + 2e-6
        for _ in range(collectives_per_step):  # compute, then the collective: one after the other on a core
            at += share
            leave = at + late_s + 5e-6
            for r in range(ranks):
                came = at + (late_s if r == late_rank else 0.0)
                events[r].append(_event("cc_running", "neuron_hw", came, leave, {"worker_gid": r, "lnc_idx": 0}))
            at = leave
        end = at + share
        model = graphs[graph]
        for r in range(ranks):
            args = {
                "device_profile": f"device_profile_{model['model_id']}",
                "nc_idx": 0,
                "model_name": f"/var/tmp/neuron-compile-cache/{model['file']}",
                "worker_gid": r,
                "lnc_idx": 0,
            }
            events[r].append(_event("nrt_execute", "neuron_rt", start, end + 1e-6, args))
            events[r].append(_event("nc_exec_running", "neuron_hw", start + 1e-6, end, {"worker_gid": r, "lnc_idx": 0}))
        timeline.append([model["sha256"], round((start + 1e-6 - 0.001) * 1e9), round((end - 0.001) * 1e9)])
        t = end + gap_s
    pids = []
    for r in range(ranks):
        pid = 4100 + r
        pids.append(pid)
        folder = root / f"i-{INSTANCE}_pid_{pid}" / TIMESTAMP
        folder.mkdir(parents=True, exist_ok=True)
        offset = clock_offsets_s[r] if r < len(clock_offsets_s) else 0.0
        shifted = [{**e, "ts": e["ts"] + offset, "end": e["end"] + offset} for e in events[r]]
        system = {"instance_id": f"i-{INSTANCE}", "process_id": pid, "worker_gid": r, "events": shifted}
        (folder / "ntrace.pb").write_bytes(b"NTRACE\0" + json.dumps(system).encode())
        (folder / "trace_info.pb").write_bytes(b"TRACEINFO\0" + json.dumps({"instance_id": f"i-{INSTANCE}"}).encode())
        body = {
            "ntff_version": 6,
            "inspect": "session",
            "neffs": sorted({g["sha256"] for g in graphs.values()}),
            "rank": r,
            "executions": len(steps),
            "timeline": timeline,
        }
        (folder / "profile_nc_0_session_0.ntff").write_bytes(b"NTFF\0" + json.dumps(body).encode())
    return {"graphs": graphs, "pids": pids}


def _event(name: str, kind: str, start: float, end: float, args: dict) -> dict:
    return {"name": name, "kind": kind, "ts": start, "end": end, "args": args}
