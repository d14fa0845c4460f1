"""The xla backend's split of a layer's time, read from real torch-xla 2.9 output (tests/data/xla/split,
made by its make.py on PJRT CPU): the optimized HLO module dumped with XLA_HLO_DEBUG=1 and the Chrome trace
of torch-xla's profiler over 3 executions. Runs without torch-xla."""

from __future__ import annotations

import pytest
from helpers import DATA

from neuronsweep.analysis.layer_categories import CATEGORIES, categorize
from neuronsweep.backends import xla_split
from neuronsweep.formats import hlo

SPLIT = DATA / "xla" / "split"
MODULE = SPLIT / "module_0000.SyncTensorsGraph.84.cpu_after_optimizations.txt"


def test_each_hlo_op_gets_the_category_of_the_aten_op_it_came_from_or_of_the_op_xla_wrapped():
    """A Linear, a GELU, a LayerNorm and a softmax: the dot is gemm, the softmax's reductions attention, the
    norm's rsqrt norm; a `call` XLA wrapped around a parallel fusion takes its root op's category, and a
    reduce XLA split off without metadata the category of the op it feeds."""
    names = xla_split.categories_of(hlo.read(MODULE))
    assert names["dot.45"] == "gemm" and names["add_rsqrt_fusion"] == "norm"
    assert names["reduce.17"] == "attention" and names["call.7"] == "elementwise"
    assert names["call.5"] == "attention"  # a call without metadata: its fusion's root is the softmax's
    # what a Linear lowers to beside its dot (the weight's transpose, the bias) is the Linear's: gemm
    assert categorize("permute", "", "Linear", "Linear.forward") == "gemm"


def test_the_split_of_real_torch_xla_executions_adds_up_to_each_span():
    events = xla_split.trace_events(SPLIT)
    rows = hlo.read(MODULE)
    executions = xla_split.executions(events, xla_split.categories_of(rows), xla_split.users_of(rows))
    assert len(executions) == 3  # one per PjRtCpuExecutable::ExecuteHelper (the dispatches)
    for start, end, spans in executions:
        assert all(start <= s <= e <= done <= end for s, e, done, _ in spans)
        assert end == max(done for _, _, done, _ in spans)
    users = xla_split.users_of(rows)
    assert users["dot.45"] == ["call.7"] and users["call.4"] == []  # the root tuple runs no thunk
    row = dict.fromkeys(("computation_kind", "opcode", "hlo_name", "operands"), "entry")
    view = [
        {**row, "opcode": o, "hlo_name": n, "operands": a}
        for o, n, a in (("dot", "d", ""), ("bitcast", "b", "d"), ("get-tuple-element", "g", "b"), ("copy", "c", "g,d"))
    ]
    assert xla_split.users_of(view)["d"] == ["c", "c"]  # through a bitcast and a get-tuple-element
    # The dot returned after 0.4 ms and its work went on in XLA's pool: its completion is where the GELU
    # that takes its output started (1.9 ms), before its `end: dot.45` event (4.8 ms, recorded after the
    # ops it made ready ran); the instants no span covers until then are the dot's.
    start, end, spans = executions[0]
    [(s, e, done, _)] = [x for x in spans if x[3] == "gemm"]
    gelu = min(x[0] for x in spans if x[3] == "elementwise")
    assert e - s < 500_000 and done == gelu and end - start < 2_200_000  # ns
    given, _ = xla_split.attribute(spans)
    others = sum(b - a for a, b, _, k in spans if k != "gemm" and s < a < done)
    assert given["gemm"] == pytest.approx(done - s - others, abs=1)
    # the third execution's trace has no `end: dot.45`: the dot ends with its span, the rest is `other`
    [(s, e, done, _)] = [x for x in executions[2][2] if x[3] == "gemm"]
    assert done == e
    split = xla_split.measure(SPLIT, MODULE)
    assert split.executions == 3 and split.span_s == pytest.approx(sorted(split.spans_s)[1], abs=1e-9)
    assert sum(split.categories_s.values()) == pytest.approx(split.span_s, rel=1e-9)
    assert all(split.categories_s[c] > 0 for c in ("gemm", "attention", "norm", "elementwise", "other"))
    assert set(split.categories_s) == set(CATEGORIES) and split.gemms_inside_s is None
    with pytest.raises(FileNotFoundError, match="wrote no plugins/profile"):
        xla_split.trace_events(SPLIT / "plugins")
