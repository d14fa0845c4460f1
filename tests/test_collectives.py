"""The collectives suite: nccl-tests' sizes and bandwidths, the plan on every backend, and a real gloo
sweep of 2 and 4 processes through Snakemake (busbw checked against its formula, one row per rank)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import snakemake, tiny_config

from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.report.figures import knee_bytes
from neuronsweep.stages import plan
from neuronsweep.workloads import collective, unsupported


def test_sizes_and_bus_bandwidth_follow_nccl_tests():
    s = collective.spec("all_reduce", 1000, 4, "fp32")  # 250 floats, rounded down to 248: 62 per rank
    assert s["bytes"] == 992 and collective.Op.of(s).counts == (248, 248)
    g = collective.spec("all_gather", 4096, 4, "bf16")
    assert collective.Op.of(g).counts == (512, 2048)  # the size is the gathered buffer
    r = collective.spec("reduce_scatter", 4096, 4, "fp32")
    assert collective.Op.of(r).counts == (1024, 256)  # the size is the input buffer
    for spec, factor in ((s, 2 * 3 / 4), (g, 3 / 4), (r, 3 / 4), (collective.spec("all_to_all", 64, 2, "fp32"), 1 / 2)):
        bw = collective.Op.of(spec).bandwidths(1e-3)
        assert bw["algbw_bytes_per_s"] == pytest.approx(spec["bytes"] / 1e-3)
        assert bw["busbw_bytes_per_s"] == pytest.approx(bw["algbw_bytes_per_s"] * factor)
    assert collective.Op.of(s).bandwidths(None)["busbw_bytes_per_s"] is None


def test_plan_expands_power_of_two_ranges_and_says_what_cannot_run():
    cfg = {
        "run": "t",
        "suites": {
            "collectives": {
                "operations": ["all_reduce"],
                "sizes": {"from": 8, "to": 100},
                "world_sizes": [2, 4],
                "dtype": ["fp32"],
            }
        },
    }
    p = plan.make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    assert sorted({sc.labels["size_asked"] for sc in p.scenarios}) == [8, 16, 32, 64]
    assert "coll-allreduce-w2-8b-fp32" in p.workloads
    assert p.unsupported == {
        "coll-allreduce-w4-0b-fp32": "all_reduce among 4 ranks needs at least one fp32 element per rank"
    }
    why = unsupported(collective.spec("all_reduce", 64, 2, "fp32"), "xla")
    assert why and "xla" in why
    assert unsupported(collective.spec("all_reduce", 64, 2, "fp32"), "neuron") is None


def test_knee_is_where_busbw_reaches_half_its_best():
    rows = pd.DataFrame({"coll_bytes": [8, 64, 512, 4096], "busbw_bytes_per_s": [1.0, 3.0, 7.0, 8.0]})
    assert knee_bytes(rows) == 512
    climbing = rows.assign(busbw_bytes_per_s=[1.0, 3.0, 5.0, 8.0])  # still rising at the largest size: no knee yet
    assert knee_bytes(climbing) is None and knee_bytes(rows.assign(busbw_bytes_per_s=None)) is None


@pytest.mark.slow
@pytest.mark.workflow
def test_gloo_sweep_of_4_ranks(tmp_path):
    """Both kinds of busbw factor (all_reduce 2(n-1)/n, reduce_scatter (n-1)/n) at n = 4, more ranks than
    cores: each rank's times, the straggler, an execution as long as its slowest rank."""
    cfg = tiny_config(
        tmp_path,
        suites={"collectives": {"operations": ["all_reduce", "reduce_scatter"], "sizes": [4096], "world_sizes": [4]}},
    )
    run = snakemake(tmp_path, config=cfg)
    assert run.proc.returncode == 0, run.output[-3000:]
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("workload_id")
    assert sorted(table.index) == ["coll-allreduce-w4-4096b-fp32", "coll-reducescatter-w4-4096b-fp32"]
    assert (table["status"] == "ok").all()
    workloads = tmp_path / "results" / "t" / "cpu" / "workloads"
    for wid, row in table.iterrows():
        n, op = int(row["coll_world"]), row["coll_op"]
        factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        assert row["algbw_bytes_per_s"] == pytest.approx(4096 / row["latency_median_s"])
        assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * factor)
        with open(workloads / wid / "tables" / "ranks.csv") as f:
            ranks = list(csv.DictReader(f))
        assert [int(r["rank"]) for r in ranks] == list(range(n))
        medians = [float(r["median_s"]) for r in ranks]
        assert row["rank_time_max_s"] == pytest.approx(max(medians))
        assert row["rank_straggler_ratio"] == pytest.approx(max(medians) / min(medians))
        # an execution takes as long as its slowest rank: the median of those is no faster than any rank's
        assert row["latency_median_s"] >= max(medians) * (1 - 1e-9)
        metrics = json.loads((workloads / wid / "metrics.json").read_text())
        assert metrics["flops"] is None and "roofline" in metrics["notes"]["flops"]
        assert metrics["correct"] is True and metrics["max_abs_error"] == 0  # every rank's result, exact
        assert (workloads / wid / "view" / "trace.pftrace").stat().st_size > 0
        # the ranks on one timeline: every timed execution's arrival and wait per rank, and one track per rank
        with open(workloads / wid / "tables" / "rank_waits.csv") as f:
            waits = list(csv.DictReader(f))
        assert {int(w["rank"]) for w in waits} == set(range(n)) and len(waits) % n == 0
        assert metrics["rank_wait_max_s"] == pytest.approx(max(float(w["wait_s"]) for w in waits))
        assert 0 <= metrics["straggler_rank"] < n and 0 <= metrics["collective_wait_pct"] <= 100
        assert metrics["collective_overlap_pct"] is None and "alone" in metrics["notes"]["collective_overlap_pct"]
        assert _slice_pids(workloads / wid / "capture" / "ranks.pftrace") == set(range(n))
    page = (tmp_path / "results" / "t" / "report.html").read_text()
    assert 'data-figure="suite_collectives"' in page and "busbw" in page


def test_the_link_a_neuron_rank_is_compared_with_comes_from_a_sourced_figure_or_is_null():
    from neuronsweep.analysis.metrics.collectives import _link_per_rank

    across = [{"nd_idx": 0}, {"nd_idx": 0}, {"nd_idx": 1}, {"nd_idx": 1}]
    notes = {}
    assert _link_per_rank("trn2", across, notes) == 1024e9 / 2  # the chip's NeuronLink-v3 shared by its 2 ranks
    assert "trn2-arch.rst" in notes["link_bytes_per_s"]
    assert _link_per_rank("trn1", across, notes) is None and "NeuronLink-v2 no bandwidth" in notes["link_bytes_per_s"]
    assert _link_per_rank("trn2", across[:2], notes) is None and "on the chip" in notes["link_bytes_per_s"]
    assert _link_per_rank("trn2", [], notes) is None and "nd_idx" in notes["link_bytes_per_s"]


def _slice_pids(path: Path) -> set[int | None]:
    """The processes whose tracks hold the slices of a .pftrace, as neuron-sweep's reader reads it back."""
    from neuronsweep.formats import pftrace_reader

    trace = pftrace_reader.read(path)
    return {trace.tracks[uuid].pid for uuid in set(trace.slices.track_uuid)}


def test_the_ranks_clocks_are_aligned_on_the_collectives_exits_and_each_wait_is_the_last_arrival_minus_its_own():
    """Rank 1's clock runs 5 s ahead; in instance 0 rank 1 arrives 2 ms after rank 0, in instance 1 rank 0
    arrives 3 ms after rank 1; both leave together (1 ms after the last arrival)."""
    from neuronsweep.analysis.rank_timeline import align, chrome_trace

    rank0 = [(10.000, 10.003), (20.003, 20.004)]
    rank1 = [(15.002, 15.003), (25.000, 25.004)]
    t = align([rank0, rank1])
    assert t.offsets_s == pytest.approx((0.0, -5.0)) and t.residual_s == pytest.approx(0.0, abs=1e-9)
    assert t.waits_s[0] == pytest.approx((0.002, 0.0)) and t.waits_s[1] == pytest.approx((0.0, 0.003))
    assert t.rank_wait_max_s == pytest.approx(0.003) and t.straggler_rank == 0  # a tie: the lowest rank
    inside = 0.003 + 0.001 + 0.001 + 0.004
    assert t.collective_wait_pct == pytest.approx(100 * 0.005 / inside)
    events = [e for e in chrome_trace([rank0, rank1], t, "all_reduce") if e["ph"] == "X"]
    assert [(e["pid"], round(e["ts"])) for e in events] == [
        (0, 10_000_000),
        (0, 20_003_000),
        (1, 10_002_000),
        (1, 20_000_000),
    ]
    with pytest.raises(ValueError, match="same instances"):
        align([rank0, rank1[:1]])


def _ns(*seconds: float) -> list[int]:
    return [round(x * 1e9) for x in seconds]


def _cc(rows: list[tuple[float, float, float]]) -> pd.DataFrame:
    """CcOp rows (trigger_start_ts, start_ts, end_ts) given in s, written in ns as the table has them."""
    return pd.DataFrame(
        [dict(zip(("trigger_start_ts", "start_ts", "end_ts"), _ns(*r)), operation="AllReduce") for r in rows]
    )


def test_a_neuron_ranks_collective_operations_go_on_one_timeline_from_their_cc_op_tables(tmp_path):
    """The same two instances as above (rank 1's clock 5 s ahead), from each rank's CcOp rows (listed out
    of order: the i-th by start is one collective); rank 0's tensor engine busy over the first half of each of
    its operations, a sync engine row that is not compute, and rank 1 computing in none of its own."""
    from neuronsweep.analysis import device_collectives

    rank0 = _cc([(20.003, 20.003, 20.004), (10.000, 10.002, 10.003)])
    rank1 = _cc([(15.002, 15.002, 15.003), (25.000, 25.003, 25.004)])
    busy0 = pd.DataFrame(
        {
            "start_ts": _ns(10.000, 20.003, 0),
            "end_ts": _ns(10.0015, 20.0035, 30),
            "engine": ["tensor", "Vector", "sync"],
        }
    )
    busy1 = pd.DataFrame({"start_ts": _ns(0), "end_ts": _ns(15), "engine": ["tensor"]})
    found = device_collectives.timeline([rank0, rank1], [busy0, busy1])
    t = found.timeline
    assert t is not None and t.offsets_s == pytest.approx((0.0, -5.0))
    assert t.waits_s[0] == pytest.approx((0.002, 0.0)) and t.waits_s[1] == pytest.approx((0.0, 0.003))
    assert found.operations == ("AllReduce", "AllReduce") and found.wait_s == pytest.approx((0.002 + 0.003) / 2)
    assert found.overlap_pct == pytest.approx(100 * (0.0015 + 0.0005) / (0.003 + 0.001 + 0.001 + 0.004))
    assert found.summary()["straggler_rank"] == 0 and found.summary()["source"] == device_collectives.SOURCE

    # what cannot be put on a timeline is said, never guessed
    assert device_collectives.timeline([rank0], [busy0]).why == "1 rank was profiled: a timeline needs two"
    assert "rank(s) 1 have no CcOp rows" in device_collectives.timeline([rank0, None], [busy0, None]).why
    untriggered = rank1.drop(columns="trigger_start_ts")
    assert "lack trigger_start_ts" in device_collectives.timeline([rank0, untriggered], [busy0, busy1]).why
    more = device_collectives.timeline([pd.concat([rank0, _cc([(30, 30, 30.001)])]), rank1], [busy0, None])
    assert "ran 3, 2 collective operations: the first 2 are aligned" in more.notes[0]
    assert more.overlap_pct is None and "no ActiveTime" in more.notes[1]

    # read from the view's per-rank parquet; a damaged file is the reason, not a traceback
    for r, (ops, busy) in enumerate([(rank0, busy0), (rank1, busy1)]):
        folder = tmp_path / "ranks" / f"rank_{r}" / "parquet"
        folder.mkdir(parents=True)
        ops.to_parquet(folder / "CcOp_0.parquet")  # a table split in parts, as large ones are
        busy.to_parquet(folder / "ActiveTime.parquet")
    assert device_collectives.read(tmp_path).summary() == found.summary()
    assert device_collectives.read(tmp_path / "ranks") is None  # no rank viewed as parquet
    (tmp_path / "ranks" / "rank_1" / "parquet" / "CcOp_0.parquet").write_bytes(b"PAR1 not parquet")
    assert "not readable" in device_collectives.read(tmp_path).why
    rank1.astype({"trigger_start_ts": str}).assign(trigger_start_ts="soon").to_parquet(
        tmp_path / "ranks" / "rank_1" / "parquet" / "CcOp_0.parquet"
    )  # a time that is no number
    assert "could not convert string to float" in device_collectives.read(tmp_path).why
