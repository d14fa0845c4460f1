"""Analysis on realistic inputs: Neuron units and MFU on real values, profiles as SQL tables, interval
union, legacy json streamed, comparisons, and the report of a real cpu run."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from helpers import DATA
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from neuronsweep.analysis import derived
from neuronsweep.analysis import ranking as compare
from neuronsweep.errors import UserError
from neuronsweep.formats.profile_db import ProfileDB
from neuronsweep.host.targets import TARGETS
from neuronsweep.stages.extract import compute
from neuronsweep.store.records import BuildRecord

SPEC = {"kind": "matmul", "m": 512, "k": 256, "n": 256, "dtype": "bf16"}


def neuron_build(target="trn1"):
    return BuildRecord.from_json(
        {
            "workload_id": "w",
            "backend": "neuron",
            "spec": SPEC,
            "target": target,
            "compile_s": 1.0,
            "cache": {"hit": False},
        }
    )


def test_mfu_recomputed_from_raw_fields_agrees_with_the_tool_on_real_values():
    # a real inf2 capture (CycleCount 149710075 in
    # a real inf2 `neuron-profile show-session` table (tools 2.28) shows it equals total_time in ps)
    summary = {
        "total_time": 149710075e-12,
        "model_flops": 67108864,
        "mfu_estimated_percent": 0.0048856,
        "peak_flops_bandwidth_ratio": 223.78146,
    }
    m = compute(summary, None, neuron_build("inf2"))
    assert m["mfu_tool_pct"] == pytest.approx(0.48856)
    assert m["mfu_recomputed_pct"] == pytest.approx(m["mfu_tool_pct"], rel=1e-4)
    t = TARGETS["inf2"]
    assert t.bf16_flops() / t.hbm_bytes_per_s == pytest.approx(summary["peak_flops_bandwidth_ratio"], rel=1e-6)


@pytest.mark.parametrize(
    "busy, active_pct, expected",
    [
        ({"tensor_engine_active_time": 8e-6, "dma_active_time": 3e-6}, 0.9, "compute"),
        ({"tensor_engine_active_time": 2e-6, "dma_active_time": 9e-6}, 0.95, "memory"),
        (
            {"vector_engine_active_time": 9e-6, "tensor_engine_active_time": 1e-6, "dma_active_time": 2e-6},
            0.9,
            "vector",
        ),
        ({"tensor_engine_active_time": 1e-6, "dma_active_time": 1e-6}, 0.2, "overhead"),
    ],
)
def test_bound_class_comes_from_busy_time_not_opcode_names(busy, active_pct, expected):
    summary = {
        "total_time": 10e-6,
        "total_active_time": active_pct * 10e-6,
        "total_active_time_percent": active_pct,
        **busy,
    }
    m = compute(summary, None, neuron_build())
    assert m["bound_class"] == expected
    assert m["bound_evidence"]


def synth_pftrace(path):
    """Engine and DMA tracks with pipelined (overlapping) instructions, interned names, nested slices,
    a counter and a track no pattern knows, written with the perfetto classes."""
    b = TraceProtoBuilder()
    tracks = {"TensorMatrix": 1, "Vector": 2, "qSyIO0": 3, "qSyIO1": 4, "mystery": 5}
    for name, uuid in tracks.items():
        td = b.add_packet().track_descriptor
        td.uuid, td.name = uuid, name
    td = b.add_packet().track_descriptor
    td.uuid, td.name = 9, "DMA Throughput"
    td.counter.unit_name = "GB/s"
    names, first = {}, [True]

    def ev(ts, typ, trk, name=None, value=None, **kw):
        p = b.add_packet()
        p.timestamp, p.trusted_packet_sequence_id = ts, 1
        p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE | (
            TracePacket.SEQ_INCREMENTAL_STATE_CLEARED if first[0] else 0
        )
        first[0] = False
        p.track_event.type, p.track_event.track_uuid = typ, trk
        if name:
            if name not in names:
                names[name] = len(names) + 1
                e = p.interned_data.event_names.add()
                e.iid, e.name = names[name], name
            p.track_event.name_iid = names[name]
        for k, v in kw.items():
            a = p.track_event.debug_annotations.add()
            a.name, a.string_value = k, v
        if value is not None:
            p.track_event.double_counter_value = value

    B, E, C = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_COUNTER
    # TensorMatrix: [0,100) MATMUL with a nested [10,20) LDWEIGHTS, and [150,200) MATMUL
    for ts, typ, trk, name in [
        (0, B, 1, "MATMUL"),
        (10, B, 1, "LDWEIGHTS"),
        (20, E, 1, None),
        (100, E, 1, None),
        (150, B, 1, "MATMUL"),
        (200, E, 1, None),
        (50, B, 2, "TENSOR_TENSOR"),
        (120, E, 2, None),
        (80, B, 3, "DMA_DIRECT2D"),
        (160, E, 3, None),
        (140, B, 4, "DMA_DIRECT2D"),
        (180, E, 4, None),
        (5, B, 5, "WHO"),
        (6, E, 5, None),
    ]:
        if name == "MATMUL" and ts == 0:
            ev(ts, typ, trk, name, nki_source_location="kernel.py:42")
        else:
            ev(ts, typ, trk, name)
    ev(90, C, 9, value=12.5)
    path.write_bytes(b.serialize())


@pytest.fixture
def view_dir(tmp_path):
    view = tmp_path / "matmul-x" / "view"
    view.mkdir(parents=True)
    synth_pftrace(view / "trace.pftrace")
    (view / "summary.json").write_text(json.dumps({"total_time": 2e-7}))
    return view


def test_engine_busy_by_interval_union_and_overlap_matrix(view_dir):
    db = ProfileDB().load(view_dir)
    busy = derived.engine_busy(db).set_index("class")
    # tensor: [0,100) and [150,200) -> 150 ns busy, though its slices sum to 100+10+50 = 160
    assert busy.loc["tensor", "busy_ns"] == 150 and busy.loc["tensor", "summed_ns"] == 160
    # dma: two queues [80,160) and [140,180) overlap -> union 100 ns, sum 120
    assert busy.loc["dma", "busy_ns"] == 100 and busy.loc["dma", "summed_ns"] == 120
    assert busy.loc["vector", "busy_ns"] == 70
    ov = derived.overlap(db).set_index(["class_a", "class_b"])["overlap_ns"]
    # tensor [0,100)+[150,200) against dma [80,180): 20 + 30
    assert ov[("tensor", "dma")] == ov[("dma", "tensor")] == 50
    assert ov[("tensor", "vector")] == 50 and ov[("vector", "dma")] == 40
    unknown = derived.unknown_tracks(db)
    assert list(unknown["name"]) == ["mystery"]  # reported, never silently dropped


def test_perfetto_names_extract_arg_and_seed_000_sql(view_dir):
    db = ProfileDB().load(view_dir)
    q = db.sql(
        "SELECT name, COUNT(*) AS count, AVG(dur)/1e6 AS avg_ms FROM slice "
        "WHERE name REGEXP 'TENSOR_TENSOR|TENSOR_REDUCE|MATMUL' GROUP BY name ORDER BY count DESC"
    ).df()
    assert dict(zip(q["name"], q["count"])) == {"MATMUL": 2, "TENSOR_TENSOR": 1}
    q = db.sql(
        "SELECT (SELECT SUM(dur) FROM slice WHERE name LIKE '%DMA%') AS dma_time, "
        "(SELECT SUM(dur) FROM slice WHERE name REGEXP 'TENSOR|VECTOR') AS compute_time"
    ).df()
    assert (q["dma_time"][0], q["compute_time"][0]) == (120, 70)
    q = db.sql(
        "SELECT s1.name AS a, s2.name AS b, COUNT(*) AS n FROM slice s1, slice s2 "
        "WHERE s1.ts < s2.ts + s2.dur AND s2.ts < s1.ts + s1.dur AND s1.id != s2.id "
        "AND s1.name REGEXP 'TENSOR|MATMUL' AND s2.name REGEXP 'TENSOR|MATMUL' GROUP BY s1.name, s2.name"
    ).df()
    assert set(zip(q["a"], q["b"])) == {("MATMUL", "TENSOR_TENSOR"), ("TENSOR_TENSOR", "MATMUL")}
    q = db.sql(
        "SELECT EXTRACT_ARG(arg_set_id, 'debug.nki_source_location') AS src, depth, "
        "(SELECT name FROM slice p WHERE p.id = slice.parent_id) AS parent FROM slice WHERE name = 'LDWEIGHTS' "
        "OR (name = 'MATMUL' AND ts = 0) ORDER BY ts"
    ).df()
    assert (
        q["src"].tolist()[0] == "kernel.py:42" and q["depth"].tolist() == [0, 1] and q["parent"].tolist()[1] == "MATMUL"
    )
    assert db.sql("SELECT value FROM counter").fetchall() == [(12.5,)]
    assert db.sql("SELECT name FROM counter_track").fetchall() == [("DMA Throughput",)]
    with pytest.raises(
        UserError,
        match="query over .* failed: .* tables here: args, counter, counter_track, flow, instant, process, slice, "
        "slice_self_dur, summary, thread, thread_slice, thread_track, top_ops, track, track_busy",
    ):
        db.sql("SELECT * FROM no_such_table")


def test_legacy_json_is_streamed_into_tables(tmp_path):
    view = tmp_path / "w" / "view"
    view.mkdir(parents=True)
    n = 120_000  # more than two stream batches
    with open(view / "profile.json", "w") as f:
        f.write('{"metadata": {"v": 1}, "summary": [{"total_time": 0.5}], "instruction": [')
        f.write(
            ",".join(
                json.dumps(
                    {
                        "timestamp": i * 10,
                        "duration": 7 + i % 3,
                        "opcode": ["MATMUL", "ACT"][i % 2],
                        "nki_source_location": f"k.py:{i % 5}",
                        "hlo_name": "dot.1",
                    }
                )
                for i in range(n)
            )
        )
        f.write('], "dma": [{"timestamp": 1, "duration": 4, "transfer_size": 65536, "semaphore_id": "-1"}]}')
    db = ProfileDB().load(view)
    assert db.sql("SELECT count(*), sum(duration) FROM instruction").fetchone() == (n, sum(7 + i % 3 for i in range(n)))
    assert db.sql("SELECT opcode, count(*) FROM instruction GROUP BY 1 ORDER BY 1").fetchall() == [
        ("ACT", n // 2),
        ("MATMUL", n // 2),
    ]
    top = derived.top_sources(db)
    assert set(top["source_kind"]) == {"nki_source_location", "hlo_name"}
    assert top.iloc[0]["source"] == "dot.1" and top.iloc[0]["instructions"] == n


def test_parquet_tables_are_read_directly(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "w" / "view" / "parquet"
    parquet.mkdir(parents=True)
    for part in (0, 1):  # split tables become one
        pq.write_table(
            pa.table({"opcode": ["MATMUL", "ACT"], "duration_ns": [10 + part, 5]}),
            parquet / f"Instruction_{part}.parquet",
        )
    pq.write_table(pa.table({"total_time": [1e-3]}), parquet / "Summary.parquet")
    db = ProfileDB().load(tmp_path / "w")
    assert db.sql('SELECT sum(duration_ns) FROM "Instruction"').fetchone() == (31,)
    assert db.sql('SELECT workload_id, total_time FROM "Summary"').fetchall() == [("w", 1e-3)]


def test_two_physical_cores_of_a_logical_core_keep_their_own_timelines(tmp_path):
    """LNC 2: pcore_idx 0 and 1 each have a TensorE. Tensor busy [0,100) on core 0 and [50,150) on core 1
    is 100 ns on each (mean 100), not a merged 150; DMA [0,100) on core 1 overlaps core 1's TensorE for
    50 ns and core 0's for nothing (mean 25), not 100."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "w" / "view" / "parquet"
    parquet.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "start_ts": [0, 50],
                "duration_ns": [100, 100],
                "engine": ["Tensor", "Tensor"],
                "opcode": ["MATMUL", "MATMUL"],
                "pcore_idx": [0, 1],
            }
        ),
        parquet / "Instruction.parquet",
    )
    pq.write_table(
        pa.table(
            {"start_ts": [0], "duration_ns": [100], "queue_name": ["q0"], "transfer_bytes": [64], "pcore_idx": [1]}
        ),
        parquet / "DmaPacket.parquet",
    )
    db = ProfileDB().load(tmp_path / "w")
    busy = derived.engine_busy(db)
    combined = busy[busy["pcore_idx"].isna()].set_index("class")["busy_ns"]
    assert combined.to_dict() == {"tensor": 100, "dma": 50}
    per_core = busy.dropna(subset=["pcore_idx"])
    assert sorted(zip(per_core["class"], per_core["pcore_idx"], per_core["busy_ns"])) == [
        ("dma", 1, 100),
        ("tensor", 0, 100),
        ("tensor", 1, 100),
    ]
    pairs = derived.overlap(db).set_index(["class_a", "class_b"])["overlap_ns"]
    assert pairs[("tensor", "dma")] == 25 and pairs[("tensor", "tensor")] == 100


def test_query_rejects_what_is_not_a_profile(tmp_path):
    with pytest.raises(UserError, match="nothing.txt: no such file or folder"):
        ProfileDB().load(tmp_path / "nothing.txt")
    (tmp_path / "notes.txt").write_text("my notes")
    with pytest.raises(UserError, match="notes.txt: not a profile"):
        ProfileDB().load(tmp_path / "notes.txt")


def rows(**groups):
    out = []
    for scenario, (suite, flops, t, spread, extra) in groups.items():
        out.append(
            {
                "scenario_id": scenario,
                "workload_id": scenario,
                "suite": suite,
                "status": "ok",
                "flops": flops,
                "latency_median_s": t,
                "latency_spread_s": spread,
                **extra,
            }
        )
    return pd.DataFrame(out)


def samples(median: float, rel_sd: float, seed: int, n: int = 6):
    """n rounds in processes of their own around a median, 5 timed samples each within 1 % of its
    round, as a capture with rounds_in_processes records them (seeded: the test cannot flake)."""
    import numpy as np

    from neuronsweep.store.records import Timing

    rng = np.random.default_rng(seed)
    rounds = list(median * np.exp(rel_sd * rng.standard_normal(n)))
    return Timing([r * (1 + 0.01 * rng.standard_normal()) for r in rounds for _ in range(5)], rounds)


def test_comparisons_rank_and_call_out_only_beyond_the_noise_between_processes():
    t = compare.compare(
        rows(
            vmap=("loops", 100, 1.0e-3, 0.1e-3, {"size": "small", "dtype": "fp32"}),
            scan=("loops", 100, 1.01e-3, 0.1e-3, {"size": "small", "dtype": "fp32"}),  # 1% slower: below 2%
            loop=("loops", 100, 3.0e-3, 0.2e-3, {"size": "small", "dtype": "fp32"}),
            k512=("tiling", 2000, 1.0e-3, 0.01e-3, {"dim": "k", "boundary": 512, "multiple": 1, "dtype": "bf16"}),
            k513=("tiling", 2004, 2.0e-3, 0.01e-3, {"dim": "k", "boundary": 512, "multiple": 1, "dtype": "bf16"}),
            k511=("tiling", 1996, 1.0e-3, None, {"dim": "k", "boundary": 512, "multiple": 1, "dtype": "bf16"}),
        ),
        {
            "vmap": samples(1.0e-3, 0.05, 1),
            "scan": samples(1.01e-3, 0.05, 2),
            "loop": samples(3.0e-3, 0.05, 3),
            "k512": samples(1.0e-3, 0.01, 4),
            "k513": samples(2.0e-3, 0.01, 5),
            # k511: no samples (a device time): ranked, never judged
        },
    ).set_index("scenario_id")
    assert t.loc["vmap", "rank_in_group"] == 1 and t.loc["loop", "x_of_best"] == pytest.approx(3.0, rel=0.05)
    assert t.loc["scan", "significant"] == False  # noqa: E712
    assert t.loc["loop", "significant"] == True  # noqa: E712
    # different work: time per FLOP, so 2x the time for 0.2% more FLOPs is ~2x
    assert t.loc["k513", "x_of_best"] == pytest.approx(2.0 / (2004 / 2000)) and t.loc["k513", "significant"] == True  # noqa: E712
    assert t.loc["k511", "rank_in_group"] == 2 and t.loc["k511", "significant"] is None


@pytest.mark.workflow
def test_report_of_a_real_cpu_run(finished_run):
    run = finished_run / "results" / "t"
    page = (run / "report.html").read_text()
    assert page.startswith("<!doctype html>")
    body = page.split("</head>", 1)[1]  # the head holds the embedded plotly.js
    assert "<script src" not in page and not re.search(r'(src|href)="https?:', body)  # nothing fetched to view it
    assert page.count("Plotly.newPlot(") == page.count('data-figure="') >= 4
    assert page.count("* plotly.js v") == 1  # one embedded copy of the library
    assert "Recommendations" in page and "matmul-m16-k16-n16-fp32" in page
    links = re.findall(r'href="([^"]+)"', body)  # every case's folder, metrics.json and .pftrace
    assert any(h.endswith("/view/trace.pftrace") for h in links) and any(h.endswith("/metrics.json") for h in links)
    assert all((run / h).exists() for h in links)


def test_track_patterns_are_configurable(view_dir):
    from neuronsweep.formats.profile_db import patterns_from

    db = ProfileDB(patterns_from({"tensor": "^TensorMatrix$", "mystery": "^myst"})).load(view_dir)
    classes = dict(db.sql("SELECT name, class FROM track_class").fetchall())
    assert classes["mystery"] == "mystery" and classes["qSyIO0"] is None  # dma no longer known: reported
    assert set(derived.unknown_tracks(db)["name"]) == {"Vector", "qSyIO0", "qSyIO1"}
    with pytest.raises(UserError, match=r"key 'track_patterns.bad' = '\(' is not a valid regex"):
        patterns_from({"bad": "("})


# A real dump: torch-xla 2.9 on PJRT CPU, (a @ b) * python_float, --xla_dump_to; the dot carries the
# metadata XLA_HLO_DEBUG=1 adds, in the form it writes (checked on a 64^3 dump)
HLO_DUMP = (DATA / "xla" / "hlo-dump-matmul-scale.txt").read_text()


def test_hlo_dump_becomes_an_instruction_table_with_its_op_mix(tmp_path):
    from neuronsweep.analysis.derived import op_mix
    from neuronsweep.formats import hlo
    from neuronsweep.formats.profile_db import ProfileDB

    rows = hlo.parse(HLO_DUMP)
    by_name = {(r["computation"], r["hlo_name"]): r for r in rows}
    assert len(rows) == 13
    dot = by_name[("SyncTensorsGraph.8", "dot.4")]
    assert (dot["opcode"], dot["computation_kind"], dot["dtype"], dot["shape"], dot["elements"]) == (
        "dot",
        "entry",
        "f32",
        "f32[256,256]",
        65536,
    )
    assert dot["op_type"] == "aten__mm" and dot["source_location"] == "matmul.py:68"
    fusion = by_name[("parallel_broadcast_multiply_fusion", "broadcast_multiply_fusion.clone")]
    assert (fusion["fusion_kind"], fusion["calls"], fusion["computation_kind"]) == (
        "kLoop",
        "fused_computation.clone",
        "called",
    )
    assert by_name[("fused_computation.clone", "multiply.1")]["computation_kind"] == "fused"
    assert by_name[("fused_computation.clone", "multiply.1")]["is_root"] is True
    assert by_name[("SyncTensorsGraph.8", "tuple.7")]["elements"] == 65536  # a tuple counts its arrays

    view = tmp_path / "view"
    hlo.write_parquet(rows, view / "parquet" / "Instruction.parquet")
    db = ProfileDB()
    db.load_view(view, "w")
    db.finish()
    mix = op_mix(db).set_index(["opcode", "computation_kind"])["instructions"].to_dict()
    assert mix[("dot", "entry")] == 1 and mix[("parameter", "fused")] == 2 and mix[("multiply", "fused")] == 1


def test_correctness_is_normwise_against_float64_numpy_at_the_precision_used():
    import numpy as np

    from neuronsweep.analysis import correctness
    from neuronsweep.workloads import loops, matmul, mlp

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 4))
    spec = matmul.spec(m=8, k=16, n=4, dtype="fp32")
    good = correctness.check(spec, {"a": a, "b": b}, (a @ b).astype(np.float32))
    assert good["correct"] and good["max_rel_error"] < 1e-6
    off = correctness.check(spec, {"a": a, "b": b}, a @ b * 1.001)  # 0.1 %: beyond fp32, within bf16
    assert not off["correct"] and off["max_rel_error"] == pytest.approx(1e-3, rel=1e-6)
    assert correctness.rejudge(off, "fp32", "matmult")["correct"]  # the compiler cast it to bf16
    nan = correctness.check(spec, {"a": a, "b": b}, np.full((8, 4), np.nan))
    assert nan["correct"] is False and nan["max_abs_error"] is None and "NaN" in nan["correct_why"]
    shape = correctness.check(spec, {"a": a, "b": b}, np.zeros((4, 8)))
    assert shape["correct"] is False and "shape" in shape["correct_why"]
    x, w = rng.standard_normal((3, 2, 4)), rng.standard_normal((4, 4))
    want = np.stack([np.maximum(x[t] @ w, 0) + 0.1 for t in range(3)])
    assert correctness.check(loops.spec("scan", 3, 2, 4, "fp32"), {"x": x, "w": w}, want)["max_abs_error"] == 0
    m = mlp.spec(b=1, s=2, h=4, i=6, dtype="bf16")
    arrays = {
        "x": rng.standard_normal((2, 4)),
        **{k: rng.standard_normal(s) for k, s in (("w_gate", (4, 6)), ("w_up", (4, 6)), ("w_down", (6, 4)))},
    }
    assert correctness.check(m, arrays, mlp.reference(mlp.GatedMlp.of(m), arrays))["tolerance_for"] == "bf16"
    varying = matmul.spec(m=8, k=16, n=4, dtype="fp32", varies="python_int")
    assert correctness.check(varying, {"a": a, "b": b}, a @ b)["correct"] is None


def test_collective_references_follow_torch_distributed():
    """What each rank holds after the collective of every rank's rank_input, computed by hand."""
    import numpy as np

    from neuronsweep.analysis import correctness
    from neuronsweep.workloads import collective

    spec = collective.spec("all_to_all", 8 * 4, 2, "fp32")  # 8 elements per rank, 2 ranks
    x0, x1 = collective.Op.of(spec).rank_input(0), collective.Op.of(spec).rank_input(1)
    assert list(x0) == [1, 2, 3, 4, 5, 6, 7, 1] and list(x1) == [2, 3, 4, 5, 6, 7, 8, 2]
    assert list(collective.Op.of(spec).rank_reference(1)) == [*x0[4:], *x1[4:]]  # chunk 1 of every rank
    rs = collective.spec("reduce_scatter", 8 * 2, 2, "bf16")  # 8 bf16 elements per rank
    assert list(collective.Op.of(rs).rank_reference(0)) == list((x0 + x1)[:4])
    good = correctness.check_rank(rs, 0, np.array([3.0, 5, 7, 9]))
    bad = correctness.check_rank(rs, 1, np.array([11.0, 13, 15, 4]))  # one element off by 1 of 15
    assert good["correct"] and not bad["correct"] and correctness.worst([good, bad])["rank"] == 1


def test_a_large_output_is_checked_on_rows_spread_over_every_tile():
    """2000 rows: 512 sampled evenly, so one wrong 128-row tile in the middle (an NKI m-tile) is caught."""
    import numpy as np

    from neuronsweep.analysis import correctness
    from neuronsweep.workloads import matmul

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2000, 32)), rng.standard_normal((32, 8))
    spec = matmul.spec(m=2000, k=32, n=8, dtype="fp32")
    out = a @ b
    good = correctness.check(spec, {"a": a, "b": b}, out)
    assert good["correct"] and good["rows_checked"] == 512 and good["rows"] == 2000
    out[1024:1152] *= 1.1
    assert correctness.check(spec, {"a": a, "b": b}, out)["correct"] is False
