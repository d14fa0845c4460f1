"""The performance-bounds ladder over each category's window of a layer (issue 74, point 2): the parquet
tables a Neuron Explorer profile has (DmaPacket, ActiveTime, Instruction, FrameworkInstruction, fields as
profile-schema-reference.rst names them) written with known intervals, read back through the ProfileDB
extract uses, and every figure checked against a hand computation."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neuronsweep.analysis import derived
from neuronsweep.analysis.intervals import covered_by, merge, starts_inside
from neuronsweep.analysis.metrics.bounds import NO_WINDOW_NECESSARY_BYTES, WINDOW_REFERENCE, window_ladder
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.analysis.window_inputs import window_inputs
from neuronsweep.stages.extract import view_db

LAYER = "LlamaDecoderLayer[0]"
FRAMEWORK = [  # attention over [0, 100) ns, the projection over [100, 300)
    {"framework_name": f"{LAYER}/LlamaAttention[0]/aten._softmax", "time_intervals": json.dumps([[0, 100]])},
    {"framework_name": f"{LAYER}/LlamaMLP[0]/Linear[0]/aten.mm", "time_intervals": json.dumps([[100, 300]])},
]
DMA = [  # start, end, bytes, queue type
    (0, 80, 20_000, "data"),
    (50, 90, 10_000, "input"),  # overlaps the first: the attention's DMA is busy [0, 90), 90 ns, not 120
    (10, 20, 4, "data"),  # 4 bytes: active time, but not counted as bytes (the guidance counts > 4)
    (150, 170, 64, "instruction"),  # the instruction queue's: active time, its bytes not counted
    (200, 230, 6_000, "data"),
]
ACTIVE = [("tensor", 100, 290), ("vector", 0, 40), ("scalar", 95, 110), ("gpsimd", 280, 320)]
INSTRUCTIONS = [  # start, opcode, adjusted_flops, tensor_instruction_type
    (50, "MATMUL", 1_000, "REGULAR"),
    (100, "MATMUL", 1_000_000, "REGULAR"),
    (250, "MATMUL", 200_000, "TRANSPOSE"),
    (20, "ACTIVATE", None, None),
]
DMA_PEAK, TE_PEAK = 1e12, 1e12  # bytes/s, FLOP/s: every packet's bytes / the peak within its own time


def peaks(cores: int) -> Peaks:
    """One physical core's peaks times `cores`, on both sides (analysis/metrics/peaks.py)."""
    return Peaks(TE_PEAK * cores, 4.0, 4e11, "trn2", cores, "the test's", DMA_PEAK * cores, "the test's DMA")


PEAKS = peaks(1)


def write_view(folder, drop: str | None = None, cores: tuple[int, ...] = (0,)):
    parquet = folder / "view" / "parquet"
    parquet.mkdir(parents=True)
    tables = {
        "FrameworkInstruction": FRAMEWORK,
        "DmaPacket": [  # each busy physical core moves the same packets at the same times
            {"start_ts": s, "end_ts": e, "duration_ns": e - s, "transfer_bytes": b, "queue_type": q, "pcore_idx": c}
            for s, e, b, q in DMA
            for c in cores
        ],
        "ActiveTime": [
            {"start_ts": s, "end_ts": e, "duration_ns": e - s, "engine": n, "pcore_idx": c}
            for n, s, e in ACTIVE
            for c in cores
        ],
        "Instruction": [
            {"start_ts": s, "end_ts": s + 10, "opcode": o, "adjusted_flops": f, "tensor_instruction_type": t}
            for s, o, f, t in INSTRUCTIONS
            for _ in cores
        ],
    }
    for name, rows in tables.items():
        table = pa.Table.from_pylist(rows)
        if drop and drop.startswith(f"{name}."):
            table = table.drop_columns([drop.split(".")[1]])
        pq.write_table(table, parquet / f"{name}.parquet")
    db = view_db(folder / "view")  # as extract reads a view
    rows, _ = derived.framework_ops(db)
    return db, rows


def test_a_window_counts_what_is_inside_it_once():
    window = merge([0, 100], [10, 150])
    assert covered_by(window, [5, 120, 140], [20, 130, 200]) == 5 + 10 + 10
    assert covered_by(window, [0, 0], [150, 150]) == 60  # overlapping intervals count once
    assert starts_inside(window, [0, 10, 99, 100, 149, 150]).tolist() == [True, False, False, True, True, False]


def test_each_categorys_window_is_read_from_the_tables_as_the_guidance_reads_it(tmp_path):
    db, rows = write_view(tmp_path)
    found, why = window_inputs(db, rows)
    assert why is None and set(found) == {"attention", "gemm"}
    attention, gemm = found["attention"], found["gemm"]
    assert attention.window_s == pytest.approx(100e-9) and gemm.window_s == pytest.approx(200e-9)
    assert attention.dma_active_s == pytest.approx(90e-9)  # [0, 90): the three packets' union
    assert attention.dma_bytes == 30_000  # the 4-byte packet left out
    assert gemm.dma_active_s == pytest.approx(50e-9)  # [150, 170) and [200, 230)
    assert gemm.dma_bytes == 6_000  # the instruction queue's 64 bytes left out
    assert attention.engine_active_s == pytest.approx({"tensor": 0, "vector": 40e-9, "scalar": 5e-9, "gpsimd": 0})
    assert gemm.engine_active_s == pytest.approx({"tensor": 190e-9, "vector": 0, "scalar": 10e-9, "gpsimd": 20e-9})
    assert (attention.hardware_flops, attention.transpose_flops) == (1_000, 0)
    assert (gemm.hardware_flops, gemm.transpose_flops) == (1_200_000, 200_000)


def test_the_window_ladder_says_the_attention_is_dma_bound_and_the_projection_tensor_bound(tmp_path):
    db, rows = write_view(tmp_path)
    found, _ = window_inputs(db, rows)
    attention = window_ladder(found["attention"], PEAKS, None)
    assert attention.bottleneck_engine == "dma"
    assert attention.bound_reference_s == pytest.approx(100e-9)
    assert attention.bound_memory_s == pytest.approx(90e-9)
    assert attention.bound_memory_ideal_s == pytest.approx(30e-9)  # DMA's bytes at peak: 30 of its 90 ns
    assert attention.bound_compute_ideal_s == pytest.approx(1_000 / TE_PEAK)
    assert attention.speedup_if_pipelined == pytest.approx(100 / 90)
    assert attention.notes["bound_reference_s"] == WINDOW_REFERENCE
    assert attention.bound_memory_no_reloads_s is None
    assert attention.notes["bound_memory_no_reloads_s"] == NO_WINDOW_NECESSARY_BYTES
    gemm = window_ladder(found["gemm"], PEAKS, None)
    assert gemm.bottleneck_engine == "tensor" and gemm.bound_pipeline_s == pytest.approx(190e-9)
    assert gemm.bound_compute_ideal_s == pytest.approx(1.2e6 / TE_PEAK)
    assert gemm.bound_compute_useful_s == pytest.approx(1.0e6 / TE_PEAK)
    # the memory family's fix leaves TensorE's 190 ns: 200 / 190
    assert gemm.speedup_if_memory_ideal == pytest.approx(200 / 190)


def test_a_dge_warning_nulls_the_windows_memory_ideal_as_it_does_the_kernels(tmp_path):
    db, rows = write_view(tmp_path)
    found, _ = window_inputs(db, rows)
    warning = [{"category": "dma", "message": "Missing additional dynamic DMA metadata, reported DMA values ..."}]
    ladder = window_ladder(found["attention"], PEAKS, warning)
    assert ladder.bound_memory_ideal_s is None and "dynamic DMA metadata" in ladder.notes["bound_memory_ideal_s"]
    assert ladder.bound_memory_s == pytest.approx(90e-9)  # the active time stands


@pytest.mark.parametrize("drop", ["ActiveTime.engine", "Instruction.adjusted_flops", "DmaPacket.queue_type"])
def test_a_profile_without_a_column_the_windows_read_gets_no_window_bounds_and_says_which(tmp_path, drop):
    db, rows = write_view(tmp_path, drop=drop)
    found, why = window_inputs(db, rows)
    assert found is None and why == f"the profile has no {drop} column, which a category's window bounds read"


def test_at_lnc_2_both_peaks_are_two_cores_and_both_cores_busy_meet_them_as_one_core_does(tmp_path):
    """A logical core of two physical ones, both doing the single core's work at the same times: every active
    time is the union over the two cores (the same 190 ns of TensorE), the work is twice (FLOPs, DMA bytes), and
    both peaks are two cores': so every rung equals the single core's. Never TensorE's two cores against one
    core's DMA, which would halve the compute rungs alone and lean the bottleneck towards memory."""
    one = window_ladder(window_inputs(*write_view(tmp_path / "one"))[0]["gemm"], peaks(1), None)
    both = window_inputs(*write_view(tmp_path / "two", cores=(0, 1)))[0]["gemm"]
    assert both.engine_active_s["tensor"] == pytest.approx(190e-9) and both.dma_active_s == pytest.approx(50e-9)
    assert (both.hardware_flops, both.dma_bytes) == (2_400_000, 12_000)
    ladder = window_ladder(both, peaks(2), None)
    for rung in ("bound_memory_s", "bound_memory_ideal_s", "bound_compute_s", "bound_compute_ideal_s"):
        assert getattr(ladder, rung) == pytest.approx(getattr(one, rung)), rung
    assert ladder.bound_memory_ideal_s == pytest.approx(12_000 / (2 * DMA_PEAK))
    assert ladder.bound_compute_ideal_s == pytest.approx(2.4e6 / (2 * TE_PEAK))
    assert ladder.bottleneck_engine == one.bottleneck_engine == "tensor"
    assert ladder.speedup_if_compute_ideal == pytest.approx(one.speedup_if_compute_ideal)


def test_at_lnc_2_one_busy_core_shows_the_idle_one_as_headroom_on_both_sides(tmp_path):
    """Only physical core 0 works: the same active times, half the logical core's peaks reached. Both ideal
    rungs halve against the single core's (the other core could take half the work), on both sides alike."""
    one = window_ladder(window_inputs(*write_view(tmp_path / "one"))[0]["gemm"], peaks(1), None)
    alone = window_inputs(*write_view(tmp_path / "lnc2"))[0]["gemm"]
    ladder = window_ladder(alone, peaks(2), None)
    assert ladder.bound_compute_s == pytest.approx(190e-9) and ladder.bound_memory_s == pytest.approx(50e-9)
    assert ladder.bound_compute_ideal_s == pytest.approx(one.bound_compute_ideal_s / 2)
    assert ladder.bound_memory_ideal_s == pytest.approx(one.bound_memory_ideal_s / 2)
    ratio = ladder.bound_memory_ideal_s / ladder.bound_compute_ideal_s
    assert ratio == pytest.approx(one.bound_memory_ideal_s / one.bound_compute_ideal_s)  # no lean
