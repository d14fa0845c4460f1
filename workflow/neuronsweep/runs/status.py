"""`neuronsweep status results/<run>`: where a sweep stands, per stage, and about how long is left.

Read from the files the stages write, so it works beside a running Snakemake (or a Slurm run) and
after one: a stage is done when its record exists, failed when its error record is newer, running
while its `logs/<stage>.running.json` names a live process (the CLI writes it for the length of the
stage; on another host it is taken as running), waiting otherwise. The time left is the stage times
measured so far (their medians) times what is left of each stage: stage time, not wall time, which
parallel jobs divide.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
from pathlib import Path
from typing import TypedDict

from neuronsweep.atomic import pid_alive, read_json, write_json
from neuronsweep.store import layout
from neuronsweep.store.failures import STAGES, failure_path

RECORD = {
    "build": "build/build.json",
    "capture": "capture/capture.json",
    "view": "view/view.json",
    "extract": "metrics.json",
}


def running_path(case_dir: Path, stage: str) -> Path:
    """The marker a stage leaves while it runs on a case (status reads it)."""
    return Path(case_dir) / "logs" / f"{stage}.running.json"


def mark_running(case_dir: Path, stage: str) -> None:
    """Mark a stage running on a case: its pid and host, so status tells running from killed."""
    write_json(running_path(case_dir, stage), {"pid": os.getpid(), "host": socket.gethostname()})


def clear_running(case_dir: Path, stage: str) -> None:
    """The stage ended: remove its marker."""
    running_path(case_dir, stage).unlink(missing_ok=True)


def _running(case_dir: Path, stage: str) -> bool:
    try:
        info = json.loads(running_path(case_dir, stage).read_text())
    except (OSError, ValueError):
        return False
    return info.get("host") != socket.gethostname() or pid_alive(int(info.get("pid", 0)))


def _wall(path: Path) -> float | None:
    """The stage's wall seconds from its record's provenance (flat, or nested in metrics.json)."""
    try:
        data = json.loads(path.read_text())
        return float(data.get("wall_s", (data.get("provenance") or {}).get("wall_s")))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def stage_state(case_dir: Path, stage: str) -> tuple[str, float | None]:
    """('done' | 'failed' | 'running' | 'waiting', the stage's wall seconds when done)."""
    record, failure = case_dir / RECORD[stage], failure_path(case_dir, stage)
    if _running(case_dir, stage):
        return "running", None
    if failure.is_file() and (not record.is_file() or failure.stat().st_mtime >= record.stat().st_mtime):
        return "failed", None
    if record.is_file():
        return "done", _wall(record)
    return "waiting", None


class RunStatus(TypedDict):
    """`neuronsweep status --json`: a run's counts per stage, its median stage times and the time left."""

    run: str
    backend: str
    workloads: int
    unsupported: int
    counts: dict[str, dict[str, int]]  # stage -> done, running, failed, waiting
    blocked: dict[str, int]  # stage -> cases waiting behind a failed stage
    median_s: dict[str, float | None]
    left_s: float
    left_unknown: list[str]  # stages none of whose runs finished yet
    summary: bool  # summary.csv written
    report: bool


def summarize(run_dir: Path) -> RunStatus:
    """A run's counts per stage (done, running, failed, waiting) and the median seconds of each."""
    plan = read_json(Path(run_dir) / "plan.json")
    wids = [w for w in plan["workloads"] if w not in plan.get("unsupported", {})]
    root = layout.workloads_dir(run_dir, plan["backend"])
    counts = {s: {"done": 0, "running": 0, "failed": 0, "waiting": 0} for s in STAGES}
    walls: dict[str, list[float]] = {s: [] for s in STAGES}
    blocked: dict[str, int] = {s: 0 for s in STAGES}  # waiting behind a failed stage of the same case
    for wid in wids:
        failed_before = False
        for stage in STAGES:
            state, wall = stage_state(root / wid, stage)
            if state == "waiting" and failed_before:
                blocked[stage] += 1
            counts[stage][state] += 1
            failed_before = failed_before or state == "failed"
            if wall is not None:
                walls[stage].append(wall)
    left, unknown = 0.0, []
    for stage in STAGES:
        todo = counts[stage]["running"] + counts[stage]["waiting"] - blocked[stage]
        if todo and walls[stage]:
            left += statistics.median(walls[stage]) * todo
        elif todo:
            unknown.append(stage)
    return {
        "run": plan["run"],
        "backend": plan["backend"],
        "workloads": len(wids),
        "unsupported": len(plan.get("unsupported", {})),
        "counts": counts,
        "blocked": blocked,
        "median_s": {s: statistics.median(w) if w else None for s, w in walls.items()},
        "left_s": left,
        "left_unknown": unknown,
        "summary": (Path(run_dir) / "summary.csv").is_file(),
        "report": (Path(run_dir) / "report.html").is_file(),
    }


def render(s: RunStatus) -> str:
    """status's text: the table of stages and the estimate of the time left."""
    lines = [
        f"{s['run']}: {s['workloads']} workloads on {s['backend']} ({s['unsupported']} unsupported, not run)",
        f"{'stage':8} {'done':>6} {'running':>8} {'failed':>7} {'waiting':>8} {'median s':>9}",
    ]
    for stage, c in s["counts"].items():
        med = s["median_s"][stage]
        lines.append(
            f"{stage:8} {c['done']:>6} {c['running']:>8} {c['failed']:>7} {c['waiting']:>8} "
            f"{'-' if med is None else f'{med:.1f}':>9}"
        )
    blocked = sum(s["blocked"].values())
    if blocked:
        lines.append(
            f"{blocked} stage(s) wait behind a failed stage of the same case and will not run until it is fixed"
        )
    todo = sum(c["running"] + c["waiting"] for c in s["counts"].values()) - blocked
    if not todo:
        lines.append("nothing left to run" + ("" if s["summary"] else "; summary.csv not written yet"))
    else:
        unknown = f"; not counted: {', '.join(s['left_unknown'])} (none finished yet)" if s["left_unknown"] else ""
        lines.append(
            f"time left: about {s['left_s']:.0f} s of stage time from the medians so far{unknown}; "
            "jobs running side by side divide it"
        )
    lines.append(
        f"summary.csv: {'written' if s['summary'] else 'not yet'}, report.html: "
        f"{'written' if s['report'] else 'not yet'}"
    )
    return "\n".join(lines)
