"""Benchmark: what a model tune's trial costs beyond the time it measures (docs/autotune.md, "Tune a model").

    python bench/tune_cost.py results/model-tune/tune/qwen2.5-0.5b [--config config/examples/model-tune.yaml]

Reads a finished tune (its shapes' trials.csv, each rung's wall seconds) and times an anchor in the same run:
- tune: per rung, the wall seconds of the calls that ran every shape's trials together (halving's screen:
  one process; the full rung: one Snakemake call; both shared by all the shapes of a group), per trial;
- anchor: kernel_tuner's way, one in-process loop timing the same (shape, configuration) pairs eagerly,
  2 warm-up calls and 5 timed ones each, as the screen takes: its wall seconds per trial.

Prints one JSON line and the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


def tune_figures(folder: Path) -> dict:
    """Per kind of call (screen, measure): the trials and the wall seconds of the calls that ran every
    shape's trials together (state.json's record), and the (shape, params) pairs measured."""
    state = json.loads((folder / "state.json").read_text())
    out: dict = {}
    for call in state.get("calls", []):
        fig = out.setdefault(call["kind"], {"trials": 0, "calls": 0, "wall_s": 0.0})
        fig["trials"] += call["trials"]
        fig["calls"] += 1
        fig["wall_s"] += call["wall_s"]
    for fig in out.values():
        fig["per_trial_s"] = fig["wall_s"] / fig["trials"]
    out["defaults_s"] = state.get("defaults_s")
    pairs = []
    for csv in sorted(folder.glob("shapes/*/*/trials.csv")):
        for _, r in pd.read_csv(csv).iterrows():
            params = {k[len("param.") :]: r[k] for k in r.index if k.startswith("param.") and pd.notna(r[k])}
            pairs.append((csv.parent.parent.name, params))
    out["pairs"] = pairs
    return out


def anchor(pairs: list, function: str) -> dict:
    """One in-process loop timing each (shape, params) eagerly: 2 warm-up calls, 5 timed."""
    import torch

    from neuronsweep.workloads import user_code

    fn = user_code.load(function)
    t0, timed = time.perf_counter(), 0.0
    with torch.inference_mode():
        for shape, params in pairs:
            m, k, n = (int(part[1:]) for part in shape.split("-")[:3])
            a, b = torch.randn(m, k), torch.randn(k, n)
            for _ in range(2):
                fn(a, b, **{p: int(v) for p, v in params.items()})
            for _ in range(5):
                s = time.perf_counter()
                fn(a, b, **{p: int(v) for p, v in params.items()})
                timed += time.perf_counter() - s
    wall = time.perf_counter() - t0
    return {"trials": len(pairs), "wall_s": wall, "timed_s": timed, "per_trial_s": wall / len(pairs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a finished tune: results/<run>/tune/<model>")
    ap.add_argument("--config", type=Path, default=REPO / "config" / "examples" / "model-tune.yaml")
    args = ap.parse_args()
    tune = tune_figures(args.folder)
    cfg = yaml.safe_load(args.config.read_text())
    candidate = next(c for c in cfg["suites"]["model"] if c.get("tune"))["tune"]["candidates"][-1]
    entry = next(e for e in cfg["suites"]["custom"] if e["name"] == candidate)
    sys.path.insert(0, str(REPO / "workflow"))
    from neuronsweep.workloads import user_code

    function = user_code.resolved(entry["function"], args.config.parent)
    loop = anchor(tune.pop("pairs"), function)
    print(json.dumps({"tune": tune, "anchor": loop}))
    print(f"defaults (every shape's compiler build, one Snakemake call): {tune.pop('defaults_s'):.1f} s")
    for effort, fig in tune.items():
        print(
            f"{effort}: {fig['trials']} trials in {fig['calls']} calls, {fig['wall_s']:.1f} s: "
            f"{fig['per_trial_s']:.2f} s a trial"
        )
    print(f"anchor (in-process loop, same pairs): {loop['wall_s']:.2f} s: {loop['per_trial_s'] * 1e3:.1f} ms a trial")


if __name__ == "__main__":
    main()
