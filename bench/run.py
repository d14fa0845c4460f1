"""The performance figures of the performance issue, each beside an anchor measured in the same run.

    python bench/run.py [--quick] [--only NAME ...]

Every figure is a whole process, timed from outside (os.wait4: the child's own user+system seconds and
peak RSS), so start-up counts as a user meets it. One JSON line per result on stdout:
  {"figure", "size", "project": {...}, "anchors": {name: {...}}, "goal", "met"}
(readers also give "project_again": the same query once the profile's tables are cached beside it)
with wall_s, cpu_s, peak_rss_mb and the figure's rate (MB/s per CPU second, slices/s) for each command.
--quick shrinks the inputs to CI size (CI runs it to prove the benches still work; its numbers are not
the figures). The figures measured here, and the machine, are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
PY = sys.executable


def measure(argv: list, cwd: Path | None = None) -> dict:
    """Run argv to its end; wall, CPU (user+system of the child and what it waited for) and peak RSS."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    # the child is reaped by communicate(); its accounting arrives in RUSAGE_CHILDREN, so take deltas
    return {
        "wall_s": round(wall, 3),
        "rc": proc.returncode,
        "out": out.decode(errors="replace")[-400:],
        "err": err.decode(errors="replace")[-400:],
    }


def timed(argv: list, cwd: Path | None = None) -> dict:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = measure(argv, cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu_s"] = round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 3)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run the biggest last or read it as a bound
    result["peak_rss_mb"] = round(after.ru_maxrss / 1024, 1)
    if result["rc"] != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))} exited {result['rc']}: {result['err']}")
    del result["out"], result["err"], result["rc"]
    return result


def _isolated(argv: list, cwd: Path | None = None) -> dict:
    """timed() in a fresh interpreter, so each command's peak RSS is its own (RUSAGE_CHILDREN keeps a max)."""
    args = [str(a) for a in argv], str(cwd) if cwd else None
    code = f"import json,sys; sys.path.insert(0, {str(HERE)!r}); import run; print(json.dumps(run.timed{args!r}))"
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "bench: failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------- legacy json

LEGACY_RECORD = {
    "timestamp": 0,
    "duration": 650,
    "evt_wait_time": 12,
    "label": "TensorMatrix",
    "opcode": "MATMUL",
    "hbm_read_bytes": 0,
    "hbm_write_bytes": 0,
    "sbuf_read_bytes": 65536,
    "sbuf_write_bytes": 0,
    "layer": "layer_0",
    "bir_debug_info_source_location": "kernel.py:42",
    "hlo_name": "dot.1",
    "operands": "[s0:p128, s1:p128]",
    "subgraph": "sg00",
    "nki_source_location": "kernel.py:42",
    "id": 7074752707989819081,
    "predecessors": [[12, 13]],
}  # real files: ids above 2^53, nested lists


def write_legacy_json(path: Path, size_mb: float, per_chunk: int = 5_000) -> int:
    """A legacy full profile in the real files' key order (summary, dma, metadata, then instruction)."""
    n, target = 0, int(size_mb * 2**20)
    with open(path, "w") as f:
        f.write(
            '{"summary": [{"total_time": 1.0}], "dma": [], '
            '"metadata": [{"pe_num_rows": 128, "pe_num_cols": 128}], "instruction": ['
        )
        while n == 0 or f.tell() < target:
            chunk = []
            for _ in range(per_chunk):
                chunk.append(
                    json.dumps(
                        dict(
                            LEGACY_RECORD,
                            timestamp=n * 700,
                            id=LEGACY_RECORD["id"] + n,
                            opcode=("MATMUL", "ACTIVATE", "TENSOR_TENSOR")[n % 3],
                        )
                    )
                )
                n += 1
            f.write(("," if n > per_chunk else "") + ",".join(chunk))
        f.write("]}")
    return n


def bench_legacy_json(tmp: Path, quick: bool) -> dict:
    """The query of a 256 MiB legacy profile (issue 72's size) beside ijson iterating the same items, each
    per CPU second net of its start-up (the same command on a file of a few records: the imports a
    query pays once, whatever the file's size)."""
    size_mb = 16 if quick else 256
    path, tiny = tmp / "profile.json", tmp / "tiny" / "profile.json"
    n = write_legacy_json(path, size_mb)
    tiny.parent.mkdir()
    write_legacy_json(tiny, 0, per_chunk=3)
    mb = path.stat().st_size / 2**20
    sql = "SELECT opcode, count(*) AS n, sum(duration) AS total FROM instruction GROUP BY 1 ORDER BY 1"
    commands = {
        "project": [BIN / "neuronsweep", "query", "{}", sql, "--csv"],
        "json.load": [PY, "-c", "import json,sys; json.load(open(sys.argv[1], 'rb'))", "{}"],
        "ijson items": [
            PY,
            "-c",
            "import ijson,sys; sum(1 for _ in ijson.items(open(sys.argv[1], 'rb'), "
            "'instruction.item', use_float=True))",
            "{}",
        ],
    }
    runs = {}
    for name, argv in commands.items():
        start_up = _isolated([str(tiny) if a == "{}" else a for a in argv])
        run = runs[name] = _isolated([str(path) if a == "{}" else a for a in argv])
        run["start_up_cpu_s"] = start_up["cpu_s"]
        run["mb_per_cpu_s"] = round(mb / run["cpu_s"], 1)
        run["mb_per_cpu_s_net"] = round(mb / max(run["cpu_s"] - start_up["cpu_s"], 1e-3), 1)
    cached = _isolated([BIN / "neuronsweep", "query", path, sql, "--csv"])  # parsed once: its tables reused
    project = runs.pop("project")
    vs_ijson = round(project["mb_per_cpu_s_net"] / runs["ijson items"]["mb_per_cpu_s_net"], 2)
    return {
        "figure": "legacy_json_query",
        "size": f"{mb:.0f} MB, {n} instructions",
        "project": project,
        "project_again": cached,
        "anchors": runs,
        "vs_ijson_net": vs_ijson,
        "goal": ">= 1.5x ijson's MB/s per CPU second net of start-up, <= 400 MB RSS",
        "met": vs_ijson >= 1.5 and project["peak_rss_mb"] <= 400,
    }


# --------------------------------------------------------------------------------------- pftrace


def write_chrome_trace(path: Path, slices: int) -> None:
    """torch.profiler's shape: 8 threads, each op a parent with three children (so the writer nests)."""
    per_track = max(1, slices // 8)
    with path.open("w") as f:
        f.write('{"traceEvents": [')
        for i in range(slices):
            track, j = divmod(i, per_track)
            group, r = divmod(j, 4)
            ts, dur = (group * 8.0, 7.5) if r == 0 else (group * 8.0 + 0.5 + 2.0 * (r - 1), 1.5)
            f.write(
                ("," if i else "")
                + json.dumps(
                    {
                        "ph": "X",
                        "name": f"op{i % 50}",
                        "cat": "cpu_op",
                        "pid": 1,
                        "tid": track,
                        "ts": ts,
                        "dur": dur,
                        "args": {"flops": i},
                    }
                )
            )
        f.write("]}")


KINETO_OP = """  {{
    "ph": "X",
    "cat": "cpu_op",
    "name": "{name}",
    "pid": 21432,
    "tid": {tid},
    "ts": {ts},
    "dur": {dur}
    ,
    "args": {{
      "External id": {i},"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, \
"Concrete Inputs": ["", "", ""], "Input type": ["float", "float", "float"], "Input Strides": [[64, 2048, 1], \
[64, 1], [1]], "Input Dims": [[32, 4, {width}], [192, 64], [192]], "Ev Idx": {i}
    }}
  }},
"""
KINETO_FLOW = """  {{
    "ph": "{ph}",
    "id": {id},
    "pid": 21432,
    "tid": {tid},
    "ts": {ts},
    "cat": "fwdbwd",
    "name": "fwdbwd"
    {bp}
  }},
"""


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_torch_trace(path: Path, slices: int) -> None:
    """torch.profiler's own text (Kineto's, key for key, as tests/data/chrome holds): ops with list
    args, three children in each parent, on two threads; epoch-like microsecond stamps with three
    decimals; a forward-to-backward flow ('s' in one op, 'f' with bp "e" in the next) per parent;
    the global instants with text pids it ends with."""
    per_track = max(4, slices // 2 // 4 * 4)
    base = 4_703_153_286_000_000  # ns on Kineto's monotonic clock
    with path.open("w") as f:
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": [\n')
        for i in range(slices):
            track, j = divmod(i, per_track)
            group, r = divmod(j, 4)
            t0 = base + group * 8_000
            ts, dur = (t0, 7_500) if r == 0 else (t0 + 500 + 2_000 * (r - 1), 1_500)
            tid = 21432 + track
            f.write(
                KINETO_OP.format(
                    name=f"aten::op{i % 50}", tid=tid, ts=_us(ts), dur=_us(dur), i=i, seq=group, width=i % 97
                )
            )
            if r == 1 and j + 4 < per_track:  # a flow to the next parent: 's' inside this one, 'f' at its start
                f.write(KINETO_FLOW.format(ph="s", id=i, tid=tid, ts=_us(ts + 100), bp=""))
                f.write(KINETO_FLOW.format(ph="f", id=i, tid=tid, ts=_us(t0 + 8_000), bp=', "bp": "e"'))
        f.write(
            '  {\n    "ph": "i",\n    "s": "g",\n    "name": "Record Window End",\n    "pid": "",\n    "tid": "",\n'
            f'    "ts": {_us(base + slices * 8_000)}\n  }}\n  ],\n  "traceName": "{path.name}"\n}}\n'
        )


CONVERT = [
    PY,
    "-c",
    "import sys; from pathlib import Path; from neuronsweep.formats import pftrace_writer; "
    "pftrace_writer.chrome_to_pftrace(Path(sys.argv[1]), sys.argv[2])",
]


def _write_figure(tmp: Path, name: str, slices: int, make, quick: bool) -> tuple[dict, Path]:
    """Converting a trace `make` writes, beside json.load of it, and four times the slices for memory."""
    chrome, out = tmp / f"{name}.json", tmp / f"{name}.pftrace"
    make(chrome, slices)
    write = _isolated([*CONVERT, chrome, out])
    parse = _isolated([PY, "-c", "import json,sys; json.load(open(sys.argv[1]))", chrome])
    json_mb = chrome.stat().st_size / 2**20
    chrome.unlink()
    larger = tmp / f"{name}-4x.json"  # memory must not grow with the trace: the same at four times the slices
    make(larger, 4 * slices)
    write_larger = _isolated([*CONVERT, larger, tmp / f"{name}-4x.pftrace"])
    larger.unlink()
    (tmp / f"{name}-4x.pftrace").unlink()
    # MB per million slices; at --quick sizes the difference is noise, not a figure
    growth = None if quick else (write_larger["peak_rss_mb"] - write["peak_rss_mb"]) / (3 * slices / 1e6)
    for r in (write, parse):
        r["slices_per_cpu_s"] = round(slices / r["cpu_s"])
    figure = {
        "size": f"{slices} slices, {json_mb:.0f} MB of JSON, {out.stat().st_size / 2**20:.0f} MB .pftrace",
        "project": write,
        "project_4x_slices": write_larger,
        "rss_mb_per_million_slices": growth and round(growth, 1),
        "anchors": {"json.load of the input": parse},
        "vs_json_load": round(parse["cpu_s"] / write["cpu_s"], 2),
    }
    return figure, out


def bench_pftrace(tmp: Path, quick: bool) -> list[dict]:
    slices = 20_000 if quick else 1_000_000
    compact, out = _write_figure(tmp, "compact", slices, write_chrome_trace, quick)
    torch_shaped, _ = _write_figure(tmp, "torch", slices, write_torch_trace, quick)
    read = _isolated([BIN / "neuronsweep", "query", out, "SELECT count(*), sum(dur) FROM slice", "--csv"])
    read_again = _isolated([BIN / "neuronsweep", "query", out, "SELECT count(*), sum(dur) FROM slice", "--csv"])
    floor = _isolated(
        [
            PY,
            "-c",
            "import sys; from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace; "
            "t = Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read()); len(t.packet)",
            out,
        ]
    )
    for r in (read, floor):
        r["slices_per_cpu_s"] = round(slices / r["cpu_s"])
    vs_parse = round(read["slices_per_cpu_s"] / floor["slices_per_cpu_s"], 2)
    flat = [
        f["rss_mb_per_million_slices"] is not None and f["rss_mb_per_million_slices"] <= 10
        for f in (compact, torch_shaped)
    ]
    return [
        {
            "figure": "pftrace_read",
            "size": compact["size"],
            "project": read,
            "project_again": read_again,
            "anchors": {"protobuf parse": floor},
            "vs_protobuf_parse": vs_parse,
            "goal": ">= 0.5x the protobuf parse's slices per CPU second, <= 500 MB RSS per million slices",
            "met": vs_parse >= 0.5 and read["peak_rss_mb"] <= 500 * max(1, slices / 1e6),
        },
        {
            "figure": "pftrace_write",  # compact JSON, one int arg: what the earlier figures measured
            **compact,
            "goal": ">= 250k slices/s and json.load's rate of the input (issue 29), RSS flat in trace size "
            "(<= 10 MB more per million slices)",
            "met": compact["project"]["slices_per_cpu_s"] >= 250_000 and compact["vs_json_load"] >= 1 and flat[0],
        },
        {
            "figure": "pftrace_write_torch_profiler",  # torch.profiler's own text: list args, flows, indentation
            **torch_shaped,
            "goal": "json.load's rate of the input (issue 29), RSS flat (<= 10 MB more per million slices)",
            "met": torch_shaped["vs_json_load"] >= 1 and flat[1],
        },
    ]


# ------------------------------------------------------------------------------------- calibrate


def bench_calibrate(tmp: Path, quick: bool) -> dict:
    dtypes = "fp32" if quick else "fp32,bf16,fp16"
    run = _isolated(
        [
            BIN / "neuronsweep",
            "calibrate",
            "--threads",
            "1",
            "--dtypes",
            dtypes,
            "--cache-dir",
            tmp / "cal-cache",
            "--device-lock",
            tmp / "cal.lock",
            "--out",
            tmp / "calibration.json",
        ]
    )
    return {
        "figure": "calibrate_fresh_host",
        "size": f"--threads 1 --dtypes {dtypes}",
        "project": run,
        "anchors": {},
        "goal": "<= 10 s of CPU",
        "met": run["cpu_s"] <= 10,
    }


# -------------------------------------------------------------------------------------- planning

# The project's DAG without the project: the same rules, files, targets, resources, logs and conda
# directives (Snakemake evaluates a conda env spec per job even without --sdm conda), each job a touch.
BARE = """
W = config["workloads"]
rule all:
    input: "results/summary.csv", "results/report.html", expand("results/w/{wid}/metrics.json", wid=W)
rule plan:
    output: "results/plan.json"
    log: "results/logs/plan.log"
    params: plan=lambda wc: "p"
    shell: "touch {output} {log}"
rule calibrate:
    output: "results/calibration.json"
    log: "results/logs/calibrate.log"
    resources: neuron_device=1
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule build:
    output: "results/w/{wid}/build/build.json", "results/w/{wid}/build/model.pt2"
    log: "results/w/{wid}/logs/build.log"
    params: spec=lambda wc: wc.wid
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule capture:
    input: "results/w/{wid}/build/build.json", "results/w/{wid}/build/model.pt2"
    output: "results/w/{wid}/capture/capture.json", "results/w/{wid}/capture/trace.json"
    log: "results/w/{wid}/logs/capture.log"
    resources: neuron_device=1
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule view:
    input: "results/w/{wid}/capture/capture.json", "results/w/{wid}/capture/trace.json"
    output: "results/w/{wid}/view/summary.json", "results/w/{wid}/view/view.json", "results/w/{wid}/view/trace.pftrace"
    log: "results/w/{wid}/logs/view.log"
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule extract:
    input:
        "results/w/{wid}/view/summary.json", "results/w/{wid}/capture/capture.json",
        "results/w/{wid}/build/build.json", "results/calibration.json"
    output: "results/w/{wid}/metrics.json"
    log: "results/w/{wid}/logs/extract.log"
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule aggregate:
    input: "results/plan.json", expand("results/w/{wid}/metrics.json", wid=W)
    output: "results/summary.csv", "results/roofline_targets.csv"
    log: "results/logs/aggregate.log"
    conda: "env.yaml"
    shell: "touch {output} {log}"
rule report:
    input: "results/summary.csv", "results/roofline_targets.csv", "results/plan.json"
    output: "results/report.html"
    log: "results/logs/report.log"
    conda: "env.yaml"
    shell: "touch {output} {log}"
"""


def _same_dag(tmp: Path, quick: bool) -> tuple[list, list, int]:
    """The project on a sweep of 250 workloads (1,005 jobs: a matmul grid of 250 M values) and a bare
    Snakefile with the same DAG: the same rules, files, targets (rule all asks for every metrics.json,
    as the project's does) and resources, each job a touch. Returns both commands (without their mode
    flags) and the job count."""
    import yaml

    workloads = 25 if quick else 250
    ms = list(range(16, 16 + 16 * workloads, 16))[:workloads]
    cfg = {
        "run": "b",
        "backend": "cpu",
        "cache_dir": str(tmp / "plan-cache"),
        "capture": {"device_lock": str(tmp / "plan.lock")},
        "suites": {"matmul": {"grid": {"m": ms, "k": [16], "n": [16]}}},
    }  # as a sweep is written
    proj, bare = tmp / "proj", tmp / "bare"
    for d in (proj, bare):
        d.mkdir()
    (proj / "config.yaml").write_text(yaml.safe_dump(cfg))
    (bare / "Snakefile").write_text(BARE)
    (bare / "env.yaml").write_text("channels: [conda-forge]\ndependencies: [python=3.11]\n")
    (bare / "config.yaml").write_text(yaml.safe_dump({"workloads": [f"matmul-m{m}-k16-n16-fp32" for m in ms]}))
    smk = BIN / "snakemake"
    project_cmd = [
        smk,
        "-s",
        REPO / "Snakefile",
        "--directory",
        proj,
        "--configfile",
        proj / "config.yaml",
        "--cores",
        "1",
        "--quiet",
    ]
    bare_cmd = [
        smk,
        "-s",
        bare / "Snakefile",
        "--directory",
        bare,
        "--configfile",
        bare / "config.yaml",
        "--cores",
        "1",
        "--quiet",
    ]
    return project_cmd, bare_cmd, workloads * 4 + 5


def _pairs(project_cmd: list, bare_cmd: list, quick: bool) -> tuple[dict, dict, float]:
    """Project and anchor alternately (3 pairs, 1 with --quick): the median pair and the median ratio."""
    pairs = [(_isolated(project_cmd), _isolated(bare_cmd)) for _ in range(1 if quick else 3)]
    ratios = sorted(p["wall_s"] / b["wall_s"] for p, b in pairs)
    project, bare_run = pairs[len(pairs) // 2]
    return project, bare_run, round(ratios[len(ratios) // 2], 2)


def _frozen(bare_cmd: list) -> list:
    """The bare Snakefile with the project's `gc.freeze()` at its end: the project's own cost on equal
    footing (the freeze makes Snakemake's collector cheaper in any Snakefile)."""
    bare = Path(bare_cmd[bare_cmd.index("-s") + 1])
    frozen = bare.with_name("Snakefile.frozen")
    frozen.write_text(bare.read_text() + "\nimport gc\ngc.freeze()\n")
    return [frozen if a == bare else a for a in bare_cmd]


def _ratios(project_cmd: list, bare_cmd: list, quick: bool) -> dict:
    project, bare_run, ratio = _pairs(project_cmd, bare_cmd, quick)
    _, frozen_run, frozen_ratio = _pairs(project_cmd, _frozen(bare_cmd), quick)
    return {
        "project": project,
        "anchors": {"bare Snakefile, same DAG": bare_run, "the same with gc.freeze()": frozen_run},
        "ratio_median": ratio,
        "ratio_median_vs_frozen": frozen_ratio,
        "goal": "<= 1.1x bare Snakemake",
        "met": ratio <= 1.1,
    }


def bench_planning(tmp: Path, quick: bool) -> dict:
    """`snakemake -n` of the project against the bare Snakefile with the same DAG."""
    project_cmd, bare_cmd, jobs = _same_dag(tmp, quick)
    _isolated(project_cmd + ["-n"])  # the host probe and the validated config, once (as after any first run)
    return {"figure": "plan_dry_run", "size": f"{jobs} jobs", **_ratios(project_cmd + ["-n"], bare_cmd + ["-n"], quick)}


def _all_outputs_present(cmd: list) -> None:
    """Every output of the DAG made empty (`--summary` lists them; `--touch` does not create missing
    files), then `--touch` to mark them up to date in order: a finished run without running one job."""
    listed = subprocess.run([str(a) for a in cmd] + ["--summary"], capture_output=True, text=True, check=True)
    workdir = Path(cmd[cmd.index("--directory") + 1])
    for line in listed.stdout.splitlines()[1:]:
        path = workdir / line.split("\t")[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    subprocess.run([str(a) for a in cmd] + ["--touch"], capture_output=True, check=True)


def bench_noop_rerun(tmp: Path, quick: bool) -> dict:
    """`snakemake --cores 1` when every job is done (both DAGs alike: every output present, marked up to
    date), so the run only checks them and finds nothing to do."""
    project_cmd, bare_cmd, jobs = _same_dag(tmp, quick)
    for cmd in (project_cmd, bare_cmd):
        _all_outputs_present(cmd)
    return {"figure": "noop_rerun", "size": f"{jobs} jobs", **_ratios(project_cmd, bare_cmd, quick)}


# ----------------------------------------------------------------------------------- rank timeline


def write_forward_ranks(folder: Path, calls: int, samples: int) -> None:
    """Two ranks' records of a forward across ranks as gloo_forward.py writes them: `samples` timed forwards of
    `calls` all-reduces each, rank 1 arriving late at every other call, its clock 3 ms ahead."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        spans, executions, t = [], [], 1000.0 + 0.003 * rank
        for _ in range(samples):
            start = t
            for c in range(calls):
                t += 0.0005
                arrive = t + (0.0002 if rank == 1 and c % 2 else 0.0)
                spans.append((arrive, t + 0.0003))
                t += 0.0003
            executions.append((start, t))
            t += 0.001
        record = {"rank": rank, "samples_s": [b - a for a, b in executions], "exec_spans_s": executions}
        record |= {"spans_s": spans, "calls": ["all_reduce"] * calls}
        (folder / f"rank_{rank}.json").write_text(json.dumps(record))


TIMELINE = """
import json, sys
from pathlib import Path
from neuronsweep.backends.programs.gloo import _forward, _timeline
folder = Path(sys.argv[1])
ranks = [json.loads((folder / f"rank_{r}.json").read_text()) for r in (0, 1)]
found = _timeline(ranks, "fwd", folder)
_forward(ranks, found["rank_waits"], 24)
"""

CHROME = """
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])
events = []
for r in (0, 1):
    rank = json.loads((folder / f"rank_{r}.json").read_text())
    for name, tid, spans in (("forward", 0, rank["exec_spans_s"]), ("all_reduce", 1, rank["spans_s"])):
        events += [
            {"ph": "X", "name": name, "pid": r, "tid": tid, "ts": a * 1e6, "dur": (b - a) * 1e6} for a, b in spans
        ]
(folder / "ranks.json").write_text(json.dumps(events))
"""


def bench_rank_timeline(tmp: Path, quick: bool) -> list[dict]:
    """The ranks of a tp 2 forward on one timeline, as its capture makes it (gloo._timeline and _forward:
    align, waits, ranks.pftrace): the example's Qwen2.5 0.5B decode (24 layers, 48 all-reduces a forward,
    15 timed forwards) and an 80-layer model's (160 a forward, 30 timed), beside a script writing the same
    slices as a Chrome trace with the json module."""
    sizes = [(48, 15)] + ([] if quick else [(160, 30)])
    out = []
    for calls, samples in sizes:
        folder = tmp / f"ranks-{calls}x{samples}"
        write_forward_ranks(folder, calls, samples)
        project = _isolated([PY, "-c", TIMELINE, folder])
        start_up = _isolated([PY, "-c", "import neuronsweep.backends.programs.gloo"])  # what a capture has paid
        anchor = _isolated([PY, "-c", CHROME, folder])
        pftrace, chrome = (folder / "ranks.pftrace").stat().st_size, (folder / "ranks.json").stat().st_size
        out.append(
            {
                "figure": "rank_timeline",
                "size": f"tp 2, {calls} collectives a forward x {samples} forwards ({2 * calls * samples} calls)",
                "project": {
                    **project,
                    "pftrace_bytes": pftrace,
                    "net_cpu_s": round(project["cpu_s"] - start_up["cpu_s"], 3),
                },
                "anchors": {"json_chrome_trace": {**anchor, "json_bytes": chrome}, "imports_only": start_up},
                "goal": "<= 1 s of CPU beyond the imports a capture has made; no larger than the Chrome JSON",
                "met": project["cpu_s"] - start_up["cpu_s"] <= 1 and pftrace <= chrome,
            }
        )
    return out


FIGURES = {
    "legacy_json": bench_legacy_json,
    "rank_timeline": bench_rank_timeline,
    "pftrace": bench_pftrace,
    "calibrate": bench_calibrate,
    "planning": bench_planning,
    "noop_rerun": bench_noop_rerun,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized inputs: proves the benches run, not the figures")
    ap.add_argument("--only", nargs="*", choices=sorted(FIGURES), help="run only these figures")
    args = ap.parse_args()
    # a user's second run imports the package's bytecode; where PYTHONDONTWRITEBYTECODE is set (CI
    # here) every timed process would compile it again, a cost json.load's anchor never pays
    subprocess.run([PY, "-m", "compileall", "-q", REPO / "workflow"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or FIGURES:
            work = Path(tmp) / name
            work.mkdir()
            results = FIGURES[name](work, args.quick)
            for result in results if isinstance(results, list) else [results]:
                print(json.dumps({**result, "quick": args.quick, "cores": os.cpu_count()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
