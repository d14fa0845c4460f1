"""Capture-phase wall time for 1, 2, 4, 8, 16 device slots on the stand-in toolchain (issue: sweep
throughput). Is the slot pool's scheduling and locking free?

    python bench/parallel_capture.py [--quick] [--slots 1 2 4 8 16] [--exec-seconds 10]

One sweep of 16 neuron cases (4 with --quick, CI's proof that the bench runs) on a stand-in trn1.32xlarge (16
chips of 2 NeuronCores) is built once; then for each slot count its captures alone are rerun (`--forcerun
capture --until capture`, `--cores` = slots) with each profiled execution held on the device for
--exec-seconds. From the capture.json records: the phase (first slot taken to last released), the speed-up
over one slot against the ideal (min(slots, 16) x), and what the pool itself costs, measured apart from the
rest:
  - handoff_s: on each slot, the gaps between one capture's release and the next one's acquire while
    captures were still waiting (the lock poll and Snakemake's job start);
  - cpu_per_capture_s: the CPU seconds of the whole capture run (Snakemake and every job) per capture:
    the capture's own processes (the stand-in profiler, framework timing in a torch process), which a
    2-core machine cannot run 16-wide. Where the speed-up falls short of linear, this is why: the
    stand-in's and the host's cost, not the pool's.
A JSON line per slot count; the goal is a speed-up within 15% of linear.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STANDIN = REPO / "tests" / "standin"
CASES = {"m": [16, 32, 48, 64], "k": [16, 32], "n": [16, 32]}  # 16 cases
QUICK_CASES = {"m": [16, 32], "k": [16], "n": [16, 32]}  # 4: two rounds of two slots


def config(work: Path, slots: int, cases: dict) -> dict:
    return {
        "run": "bench",
        "backend": "neuron",
        "cache_dir": str(work / "cache"),
        "neuron": {"profiler": "neuron-explorer"},
        "capture": {
            "warmup": 0,
            "iterations": 1,
            "repeats": 1,
            "num_exec": 2,
            "nth_exec": 2,
            "device_lock": str(work / "device.lock"),
            "slots": slots,
        },
        "suites": {"matmul": {"grid": cases, "dtype": ["fp32"]}},
    }


def snakemake(work: Path, env: dict, slots: int, cases: dict, *args: str) -> tuple[float, float]:
    """Wall and CPU seconds (Snakemake and all its jobs) of one run."""
    import resource

    import yaml

    (work / "config.yaml").write_text(yaml.safe_dump(config(work, slots, cases)))
    t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [
            str(BIN / "snakemake"),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(work / "config.yaml"),
            "--cores",
            str(max(slots, 2)),
            *args,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench: snakemake exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def spans(work: Path) -> list[dict]:
    return [
        json.loads(p.read_text())["device_span"]
        for p in work.glob("results/bench/neuron/workloads/*/capture/capture.json")
    ]


def handoffs(records: list[dict]) -> list[float]:
    """Per slot, release -> next acquire, only while some capture was still waiting for a slot."""
    last_start = max(r["acquired_unix"] for r in records)
    gaps = []
    by_slot: dict[int, list[dict]] = {}
    for r in records:
        by_slot.setdefault(r["slot"], []).append(r)
    for group in by_slot.values():
        group.sort(key=lambda r: r["acquired_unix"])
        gaps += [
            b["acquired_unix"] - a["released_unix"] for a, b in zip(group, group[1:]) if a["released_unix"] < last_start
        ]
    return gaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 cases on 1, 2 and 4 slots, 0.5 s per execution (CI)")
    ap.add_argument("--slots", type=int, nargs="+")
    ap.add_argument("--exec-seconds", type=float)
    args = ap.parse_args()
    counts = sorted({1, *(args.slots or ([1, 2, 4] if args.quick else [1, 2, 4, 8, 16]))})  # 1: the baseline
    exec_s = args.exec_seconds or (0.5 if args.quick else 10.0)
    cases = QUICK_CASES if args.quick else CASES
    work = Path(tempfile.mkdtemp(prefix="bench-slots-"))
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(STANDIN / "bin"), str(BIN), os.environ["PATH"]]),
        "PYTHONPATH": str(STANDIN / "python"),
        "STANDIN_CORE_DIR": str(work / "cores"),
        "STANDIN_DEVICES": "16",
        "STANDIN_EXEC_SECONDS": str(exec_s),
    }
    try:
        snakemake(work, env, max(counts), cases, "--until", "build")
        base = None
        for k in counts:
            wall, cpu = snakemake(work, env, k, cases, "--until", "capture", "--forcerun", "capture")
            records = spans(work)
            phase = max(r["released_unix"] for r in records) - min(r["acquired_unix"] for r in records)
            held = [r["released_unix"] - r["acquired_unix"] for r in records]
            base = base or phase  # counts start at 1
            ideal = min(k, len(records))
            gaps = handoffs(records) or [0.0]
            speedup = base / phase
            print(
                json.dumps(
                    {
                        "figure": f"capture phase, {len(records)} captures",
                        "slots": k,
                        "exec_s_per_execution": exec_s,
                        "project": {
                            "phase_s": round(phase, 2),
                            "snakemake_wall_s": round(wall, 2),
                            "speedup": round(speedup, 2),
                            "ideal": ideal,
                            "median_hold_s": round(statistics.median(held), 2),
                            "handoff_median_s": round(statistics.median(gaps), 3),
                            "handoff_max_s": round(max(gaps), 3),
                            "cpu_per_capture_s": round(cpu / len(records), 2),
                        },
                        "anchors": {"device_time_per_capture_s": round(2 * exec_s + 0.3, 2)},
                        "goal": "speed-up >= 0.85 x linear",
                        "met": speedup >= 0.85 * ideal,
                    }
                ),
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
