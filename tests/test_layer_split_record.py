"""One layer-split record (store/layer_split.py), made by each backend's producer and read by one reader
(analysis/metrics/layer_split.py): cpu's profiler ranges, xla's per-op spans (real torch-xla output), neuron's
FrameworkInstruction table."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

from neuronsweep.analysis import framework_split
from neuronsweep.analysis.layer_categories import CATEGORIES
from neuronsweep.analysis.metrics.layer_split import layer_split
from neuronsweep.backends import xla_split
from neuronsweep.errors import UserError
from neuronsweep.store.layer_split import LayerSplitRecord
from neuronsweep.store.records import CaptureRecord

SPLIT = DATA / "xla" / "split"
MODULE = SPLIT / "module_0000.SyncTensorsGraph.84.cpu_after_optimizations.txt"


def capture_with(record: LayerSplitRecord | None, backend: str, why: str | None = None) -> CaptureRecord:
    """A capture record as a capture stage writes it and the next stage reads it back from JSON."""
    made = CaptureRecord.create(0.0, workload_id="layer-x", backend=backend, spec=None, layer_split=record)
    if why:
        made = CaptureRecord.create(0.0, workload_id="layer-x", backend=backend, spec=None, layer_split_why=why)
    return CaptureRecord.from_json(json.loads(json.dumps(made.to_json())))


def check(record: LayerSplitRecord) -> None:
    """What every producer's record holds: every category, adding up to the span."""
    assert isinstance(record, LayerSplitRecord)
    assert set(record.categories_s) == set(CATEGORIES)
    assert sum(record.categories_s.values()) == pytest.approx(record.span_s, rel=1e-9)
    assert all(v >= 0 for v in record.categories_s.values())


def test_the_median_execution_is_kept_and_other_is_the_rest_of_its_span():
    runs = [(3.0, {"gemm": 1.0}), (1.0, {"gemm": 0.5}), (2.0, {"gemm": 1.5, "other": 0.1})]
    record = LayerSplitRecord.median_of(runs, "test")
    assert record.span_s == 2.0 and record.categories_s == {"gemm": 1.5, "other": 0.5}
    assert record.executions == 3 and record.spans_s == [3.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="at least one execution"):
        LayerSplitRecord.median_of([], "test")


@pytest.mark.torch
def test_the_cpu_producer_records_a_split_the_reader_reads_back_from_capture_json():
    torch = pytest.importorskip("torch")
    from neuronsweep.backends import cpu_split

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(32, 64)
            self.norm = torch.nn.LayerNorm(64)

        def forward(self, x):
            return torch.nn.functional.gelu(self.norm(self.up(x)))

    x = torch.randn(8, 32)
    program = torch.export.export(Block().eval(), (x,)).module()
    record = cpu_split.measure(program, [x])
    check(record)
    assert record.executions == cpu_split.EXECUTIONS and set(record.gemms_inside_s or {}) == {"up"}
    part = layer_split(capture_with(record, "cpu"), "cpu", record.span_s)
    assert part.split_gemm_s == record.categories_s["gemm"] > 0 and part.split_norm_s > 0
    assert part.split_span_over_latency == pytest.approx(1.0) and part.gemms_inside_s == record.gemms_inside_s


def test_the_xla_producer_records_the_same_record_from_real_torch_xla_output():
    record = xla_split.measure(SPLIT, MODULE)
    check(record)
    assert record.gemms_inside_s is None and record.gemms_inside_why == xla_split.NO_GEMM_MODULES
    part = layer_split(capture_with(record, "xla"), "xla", None)
    assert part.split_span_s == record.span_s and part.notes["gemms_inside_s"] == xla_split.NO_GEMM_MODULES
    failed = layer_split(capture_with(None, "xla", why="no split of this layer: no trace"), "xla", None)
    assert failed.split_span_s is None and failed.notes["split_span_s"] == "no split of this layer: no trace"


def test_the_neuron_producer_reads_the_profile_and_the_reader_takes_it_from_there_not_the_capture():
    ops = [("L[0]/Linear[0]/aten.mm", "[[0, 60]]"), ("L[0]/LlamaRMSNorm[0]/aten.mul", "[[60, 80]]")]
    record, why = framework_split.split(ops, 100e-9)
    assert why is None and record is not None
    check(record)
    assert record.framework_ops == 2 and record.categories_s["other"] == pytest.approx(20e-9)
    part = layer_split(capture_with(None, "neuron"), "neuron", None, (record, None))
    assert part.split_gemm_s == pytest.approx(60e-9) and part.split_norm_s == pytest.approx(20e-9)
    missing = layer_split(capture_with(None, "neuron"), "neuron", None)
    assert "FrameworkInstruction" in missing.notes["split_span_s"]


def test_a_damaged_split_in_capture_json_is_one_sentence():
    made = capture_with(LayerSplitRecord.median_of([(1.0, {"gemm": 0.5})], "test"), "cpu").to_json()
    earlier = {**made["layer_split"], "span_spread_s": 0.1}  # what xla's split wrote beside before: passed over
    assert CaptureRecord.from_json({**made, "layer_split": earlier}).layer_split.span_s == 1.0
    for damaged in ({"span": 1}, "a string", {**made["layer_split"], "categories_s": [1, 2]}):
        with pytest.raises(UserError, match="capture.json: its layer_split is not this version's") as err:
            CaptureRecord.from_json({**made, "layer_split": damaged})
        assert "rerun the capture stage" in str(err.value)
