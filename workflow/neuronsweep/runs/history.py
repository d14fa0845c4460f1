"""The history of a team's runs: every finished run appends its rows to results/history/, and
`neuronsweep history` shows each workload's time over the runs with its change points.

The store is a folder of Parquet files, one per finished run (`entries/<run>-<finished>-<hash>.parquet`):
appending is writing a new file, so two sweeps finishing at once never corrupt it, a damaged file
costs its own run only, and any tool that reads Parquet (DuckDB, pandas) reads the whole history with
one glob. Like the compile cache it lives outside results/<run>, which the next run of the same name
overwrites: that is what makes it a history. An entry is one row per workload: the run's name, folder
and finish time, the toolchain versions, a hash of its config, the host, the user's git commit (when
the sweep ran in a repository), and per workload its status, time (basis as compare's) and every timed
sample. The same summary is never appended twice (its hash names the file).
"""

from __future__ import annotations

import hashlib
import html
import json
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from neuronsweep.analysis import changepoints, verdict
from neuronsweep.atomic import replacing
from neuronsweep.errors import UserError
from neuronsweep.report.page import human, page
from neuronsweep.report.page import table as html_table
from neuronsweep.runs.compare import Run
from neuronsweep.store.records import Timing

ENTRY_COLUMNS = [
    "run",
    "folder",
    "finished_at",
    "entry",
    "backend",
    "toolchain",
    "config_hash",
    "host",
    "git_commit",
    "workload_id",
    "status",
    "basis",
    "time_s",
    "noisy",
    "samples_s",
    "round_medians_s",
]


def store_of(run_dir: Path) -> Path:
    """results/history beside results/<run>."""
    return Path(run_dir).resolve().parent / "history"


def _git(cwd: Path) -> str | None:
    """HEAD of the repository the sweep ran in, '+dirty' with uncommitted changes; None outside one."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def entry(run_dir: Path) -> pd.DataFrame:
    """The rows a finished run adds to the history."""
    run = Run(run_dir)
    summary = (run.folder / "summary.csv").read_bytes()
    toolchain = json.dumps(run.toolchains(), sort_keys=True)
    finished = datetime.fromtimestamp((run.folder / "summary.csv").stat().st_mtime, UTC)
    common = {
        "run": run.plan.get("run", run.folder.name),
        "folder": str(run.folder.resolve()),
        "finished_at": finished.isoformat(timespec="seconds"),
        "entry": hashlib.sha256(summary).hexdigest()[:12],
        "backend": run.backend,
        "toolchain": toolchain,
        "config_hash": hashlib.sha256(json.dumps(run.config, sort_keys=True).encode()).hexdigest()[:12],
        "host": platform.node(),
        "git_commit": _git(run.folder.resolve().parent.parent),  # the folder snakemake ran in
    }
    rows = []
    for wid, r in run.rows.iterrows():
        timed = pd.notna(r.get("latency_median_s"))
        basis = (
            "latency_median_s" if timed else "profile_total_time_s" if pd.notna(r.get("profile_total_time_s")) else None
        )
        timing = run.samples(wid) if timed and r["status"] == "ok" else None
        rows.append(
            {
                **common,
                "workload_id": wid,
                "status": r["status"],
                "basis": basis,
                "time_s": float(r[basis]) if basis and r["status"] == "ok" else None,
                "noisy": verdict.flag(r.get("noisy")),
                "samples_s": timing and timing.samples,
                "round_medians_s": timing and timing.rounds,
            }
        )
    return pd.DataFrame(rows, columns=ENTRY_COLUMNS)


def append(run_dir: Path, store: Path | None = None) -> tuple[Path, bool]:
    """Adds the run to the store; (its entry file, whether it was new)."""
    rows = entry(run_dir)
    store = Path(store) if store else store_of(run_dir)
    first = rows.iloc[0] if len(rows) else None
    if first is None:
        raise UserError(f"{run_dir}: summary.csv has no rows; nothing to add to the history.")
    folder = store / "entries"
    existing = sorted(folder.glob(f"{first['run']}-*-{first['entry']}.parquet"))
    if existing:
        return existing[0], False
    folder.mkdir(parents=True, exist_ok=True)
    stamp = first["finished_at"].replace(":", "").replace("-", "").replace("+0000", "Z")
    path = folder / f"{first['run']}-{stamp}-{first['entry']}.parquet"
    with replacing(path) as tmp:
        rows.to_parquet(tmp, index=False)
    return path, True


def load(store: Path, runs: list[str] | None = None) -> pd.DataFrame:
    """Every entry of the store (of the named runs only, when given), oldest first."""
    folders = [r for r in runs or [] if Path(r).is_dir()]
    if folders:
        hint = f"--store {folders[0]}" if (Path(folders[0]) / "entries").is_dir() else f"--add {folders[0]}"
        raise UserError(
            f"{folders[0]} is a folder, not a run name; a history folder goes with --store and a finished run's "
            f"folder with --add: neuronsweep history {hint}."
        )
    files = sorted((Path(store) / "entries").glob("*.parquet"))
    if not files:
        raise UserError(
            f"{store}: no history yet; every sweep that finishes adds itself (snakemake --cores 1), or add "
            "finished runs by hand: neuronsweep history --add results/<run>."
        )
    frames = []
    for path in files:
        try:
            frames.append(pd.read_parquet(path))
        except (OSError, ValueError) as exc:  # one damaged entry costs its own run
            print(f"{path}: not a readable history entry ({exc}); skipped. Delete it, or add the run again.")
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ENTRY_COLUMNS)
    df = df.reindex(columns=list(dict.fromkeys([*ENTRY_COLUMNS, *df.columns])))  # entries of older versions
    if runs:
        unknown = sorted(set(runs) - set(df["run"]))
        if unknown:
            raise UserError(
                f"no run named {', '.join(unknown)} in {store} (known: {', '.join(sorted(set(df['run'])))})."
            )
        df = df[df["run"].isin(runs)]
    return df.sort_values(["finished_at", "run"], kind="stable").reset_index(drop=True)


def series(df: pd.DataFrame, min_effect: float = changepoints.MIN_EFFECT) -> pd.DataFrame:
    """One row per workload and entry (status ok), with `change_point` True where a new level starts."""
    ok = df[(df["status"] == "ok") & df["time_s"].notna()].copy()
    ok["label"] = ok["run"] + " @ " + ok["finished_at"].str[:16]
    ok["change_point"] = False
    ok["step_pct"] = None
    for _, part in ok.groupby(["workload_id", "backend", "basis"], sort=False):
        times = part["time_s"].astype(float).tolist()
        for i in changepoints.find(times, min_effect):
            before = pd.Series(times[:i]).median()
            ok.loc[part.index[i], ["change_point", "step_pct"]] = [True, (times[i] / before - 1) * 100]
    return ok


def _versions(toolchain: str) -> str:
    try:
        return ", ".join(f"{k} {v}" for k, v in json.loads(toolchain).items())
    except (TypeError, ValueError):
        return ""


def figure(ok: pd.DataFrame) -> go.Figure:
    """Each case's time across runs, a line per case, its change points marked."""
    fig = go.Figure()
    for (wid, backend), part in ok.groupby(["workload_id", "backend"], sort=True):
        hover = [
            f"{wid}<br>{r.run} ({r.finished_at})<br>{human('time_s', r.time_s)}<br>{_versions(r.toolchain)}"
            f"<br>git {r.git_commit or 'n/a'}<br>config {r.config_hash}"
            for r in part.itertuples()
        ]
        fig.add_trace(
            go.Scatter(
                x=part["label"],
                y=part["time_s"],
                mode="lines+markers",
                name=f"{wid} ({backend})",
                hovertext=hover,
                hoverinfo="text",
            )
        )
        steps = part[part["change_point"].astype(bool)]
        if len(steps):
            fig.add_trace(
                go.Scatter(
                    x=steps["label"],
                    y=steps["time_s"],
                    mode="markers",
                    marker=dict(symbol="x", size=14, color="#c44e52"),
                    name=f"change point: {wid}",
                    hovertext=[f"{wid}: step {s:+.1f}% here" for s in steps["step_pct"]],
                    hoverinfo="text",
                    showlegend=False,
                )
            )
    fig.update_layout(
        title="Time per workload over the runs (x: a change point)",
        template="plotly_white",
        height=560,
        yaxis=dict(title="time (s)", type="log"),
        xaxis=dict(title="run", type="category"),
        legend=dict(font=dict(size=10)),
    )
    return fig


def write_html(ok: pd.DataFrame, out: Path) -> Path:
    """history.html: the figure, the steps found and the runs."""
    steps = ok[ok["change_point"].astype(bool)][
        ["workload_id", "run", "finished_at", "step_pct", "time_s", "git_commit"]
    ]
    first = ok.drop_duplicates("entry")
    runs = first[["run", "finished_at", "backend", "toolchain", "config_hash", "git_commit", "host"]]
    runs = runs.assign(toolchain=runs["toolchain"].map(_versions))
    runs = runs.map(lambda v: "" if v is None or v != v else html.escape(str(v)))
    runs["report"] = [f'<a href="{html.escape(Path(f).as_uri())}/report.html">report</a>' for f in first["folder"]]
    body = pio.to_html(figure(ok), include_plotlyjs=False, full_html=False, default_width="100%")
    parts = [
        "<h1>neuron-sweep: history</h1>",
        f'<div class="figure">{body}</div>',
        "<h2>Change points</h2>",
        "<p class=muted>PELT on each workload's log time over the runs, with a step of at least the minimum effect "
        "(docs/comparing-runs.md). Where to look; `neuronsweep compare` of the two runs judges it, timing "
        "both again in turns.</p>",
        html_table(steps) if len(steps) else "<p>none</p>",
        "<h2>Runs</h2>",
        html_table(runs, escape=False),
    ]
    with replacing(out) as tmp:
        tmp.write_text(page("neuron-sweep history", parts, plotly=True))
    return out


def gate(df: pd.DataFrame, pct: float, last: int, min_effect: float) -> tuple[list[str], int]:
    """The newest entry against the pooled samples of the `last` entries before it (same backend);
    where every one of them timed its rounds in processes of their own, against their pooled round
    medians: each earlier process is a replicate of the earlier code."""
    newest = df["entry"].iloc[-1]
    new = df[df["entry"] == newest]
    earlier = df[(df["entry"] != newest) & (df["backend"] == new["backend"].iloc[0])]
    base_entries = list(dict.fromkeys(earlier["entry"]))[-last:]
    if not base_entries:
        return [f"regression gate: no earlier run of the {new['backend'].iloc[0]} backend to compare with"], 0
    base = earlier[earlier["entry"].isin(base_entries)]
    pairs, wids = [], []
    for r in new[new["status"] == "ok"].itertuples():
        past = base[(base["workload_id"] == r.workload_id) & (base["status"] == "ok")]
        if not len(past):
            continue
        mine = new[new["workload_id"] == r.workload_id]
        pairs.append((_pooled(past), _pooled(mine)))
        wids.append(r.workload_id)
    said = verdict.judge(pairs, min_effect=min_effect, gate=pct / 100)
    # (workload, ratio, Holm p, unit): a verdict that fails the gate has its interval, so its ratio
    worse = [
        (w, v.ratio, v.p_adjusted, v.unit)
        for w, v in zip(wids, said)
        if verdict.fails_gate(v.said, v.ci_low, pct) and v.ratio is not None
    ]
    lines = [
        f"regression gate: {new['run'].iloc[0]} ({new['finished_at'].iloc[0]}) against the pooled samples of the "
        f"{len(base_entries)} run(s) before it: {sum(v.judged for v in said)} judged, "
        f"{sum(v.said == verdict.SLOWER for v in said)} slower, {sum(v.said == verdict.FASTER for v in said)} faster"
    ]
    for w, ratio, p, unit in sorted(worse, key=lambda x: -x[1]):
        lines.append(f"  slower {100 * (ratio - 1):+.1f}%  {w}  (Holm p {p:.2g}, tested on {unit})")
    if worse:
        lines.append(
            f"regression: {len(worse)} workload(s) slower by more than {pct}% with 95% confidence than the last "
            f"{len(base_entries)} run(s)"
        )
    blind = [v.detectable for v in said if v.said.startswith(verdict.BLIND) and v.detectable is not None]
    if blind:
        lines.append(
            f"gate: {len(blind)} workload(s) not judged: their processes could only show changes over "
            f"{100 * min(blind):.0f}-{100 * max(blind):.0f} %, wider than the gate's {pct:g} % (time more rounds)"
        )
    one = sum(v.said == verdict.ONE_PROCESS for v in said)
    if one:
        lines.append(
            f"gate: {one} workload(s) of the newest run timed in one process were not judged, so not gated "
            "(time its rounds in processes of their own: capture.rounds_in_processes: true)"
        )
    return lines, 1 if worse else 0


def _pooled(entries: pd.DataFrame) -> Timing | None:
    """The samples of these entries together, and their processes: each entry's round medians where it
    timed its rounds in processes of their own, else (among several runs) its median, since each run
    is a process of its own. One entry without rounds is one process: not judged."""
    samples, processes = [], []
    for got, rounds in zip(entries["samples_s"], entries["round_medians_s"]):
        mine = [] if got is None or isinstance(got, float) else list(got)
        samples += mine
        if rounds is not None and not isinstance(rounds, float) and len(rounds):
            processes += list(rounds)
        elif mine and len(entries) > 1:
            processes.append(float(np.median(mine)))
    return Timing(samples, processes or None) if samples else None


def render(ok: pd.DataFrame) -> list[str]:
    """history's text: each case's times across runs, a | before each change point."""
    lines = []
    for (wid, backend), part in ok.groupby(["workload_id", "backend"], sort=True):
        cells = [
            ("| " if cp else "") + f"{r}: {human('time_s', t)}"
            for r, t, cp in zip(part["run"], part["time_s"], part["change_point"].astype(bool))
        ]
        steps = part[part["change_point"].astype(bool)]
        said = "; ".join(f"step {s:+.1f}% at {r}" for r, s in zip(steps["run"], steps["step_pct"])) or "no change point"
        lines.append(f"{wid} ({backend}): {', '.join(cells)}  [{said}]")
    return lines


def run(
    store: Path,
    runs: list[str],
    add: list[Path],
    out: Path | None,
    fail_on_regression: float | None,
    last: int,
    min_effect_pct: float,
) -> tuple[list[str], int]:
    """`neuronsweep history`: add runs to the store, find each case's steps, write the page, gate the newest."""
    lines = []
    for folder in add:
        path, new = append(folder, store)
        lines.append(f"{'added' if new else 'already in the history'}: {folder} ({path.name})")
    df = load(store, runs or None)
    ok = series(df, min_effect_pct / 100)
    lines += render(ok)
    out = out or Path(store) / "history.html"
    write_html(ok, out)
    lines.append(f"wrote {out}")
    code = 0
    if fail_on_regression is not None:
        said, code = gate(df, fail_on_regression, last, min_effect_pct / 100)
        lines += said
    return lines, code
