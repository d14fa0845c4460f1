"""A layer's time by category on neuron, from the profile's FrameworkInstruction table (Neuron Explorer's
parquet): the framework op names read as the schema reference writes them, overlapping ops sharing their
time, the categories adding up to the execution's total_time, and a table that cannot be of one execution
refused with why; and the report's model section where, as there, no GEMM has a time inside its layer."""

from __future__ import annotations

import json

import pytest

from neuronsweep.analysis.framework_split import parse, split
from neuronsweep.analysis.layer_categories import CATEGORIES


def test_a_framework_name_reads_as_its_op_and_its_innermost_module():
    """The schema reference's own example, and a name with the modules of a Qwen3-MoE layer."""
    assert parse("NeuronLlamaDecoderLayer[1]/function[2]/aten.add") == (
        "add",
        "NeuronLlamaDecoderLayer",
        "NeuronLlamaDecoderLayer",
    )
    assert parse("Qwen3MoeDecoderLayer[0]/Qwen3MoeAttention[0]/Qwen3MoeRMSNorm[2]/aten.mul") == (
        "mul",
        "Qwen3MoeDecoderLayer.Qwen3MoeAttention.Qwen3MoeRMSNorm",
        "Qwen3MoeRMSNorm",
    )


def rows(*ops: tuple[str, list]) -> list[tuple[str, str]]:
    return [(name, json.dumps(intervals)) for name, intervals in ops]


def test_the_categories_add_up_to_the_execution_and_overlapping_ops_share_their_time():
    """A projection, attention's softmax, a norm overlapping an activation for 10 ns (5 ns each), and
    110 ns that no op covers (a gap and the tail): other."""
    layer = "LlamaDecoderLayer[0]"
    table = rows(
        (f"{layer}/LlamaAttention[0]/Linear[0]/aten.mm", [[0, 60], [70, 110]]),
        (f"{layer}/LlamaAttention[0]/aten._softmax", [[110, 160]]),
        (f"{layer}/LlamaRMSNorm[1]/aten.mul", [[160, 180]]),
        (f"{layer}/LlamaMLP[0]/SiLUActivation[0]/aten.silu", [[170, 210]]),
    )
    got, why = split(table, 310e-9)
    assert why is None
    ns = {c: round(v * 1e9, 6) for c, v in got.categories_s.items()}
    shares = {"gemm": 100, "attention": 50, "norm": 15, "elementwise": 35, "other": 310 - 200}
    assert ns == {**dict.fromkeys(CATEGORIES, 0.0), **shares}
    assert sum(got.categories_s.values()) == pytest.approx(got.span_s, rel=1e-12)
    assert got.gemms_inside_s is None and "FrameworkInstruction" in got.method and got.framework_ops == 4


def test_a_table_that_is_not_of_one_execution_or_not_intervals_is_refused_with_why():
    long = rows(("L[0]/aten.mm", [[0, 500]]))
    got, why = split(long, 300e-9)
    assert got is None and "more than the execution's total_time" in why
    got, why = split([("L[0]/aten.mm", "[[0, 10], [5]]")], 1e-6)
    assert got is None and "'L[0]/aten.mm'" in why and "[[start, end], ...]" in why
    got, why = split([("L[0]/aten.mm", "[[10, 0]]")], 1e-6)
    assert got is None and "ends before it starts" in why
    assert split([], 1e-6) == (None, "the profile's FrameworkInstruction table is empty")
    assert split(rows(("L[0]/aten.mm", [[0, 5]])), None)[1] == "the profile has no total_time to split"


def test_the_reports_model_section_says_why_it_has_no_isolation_gap_rather_than_draw_an_empty_one(tmp_path):
    """On xla and neuron a GEMM has no time inside its layer: the section says why instead of an empty figure;
    with the cpu's gap it draws it."""
    import pandas as pd

    from neuronsweep.stages.report import _whole_model

    key = {"model": "m", "phase": "decode", "batch": 1, "seq": 16, "dtype": "fp32"}
    pd.DataFrame([{**key, "forward_time_s": 0.01, "gemms_alone_time_s": 0.005, "forward_why": ""}]).to_csv(
        tmp_path / "model-m-forward.csv", index=False
    )
    gap = {**key, "part": "dense", "module": "mlp.up_proj", "gemms": 1, "inside_s": None, "alone_s": 2e-4}
    pd.DataFrame([gap | {"isolation_gap": None}]).to_csv(tmp_path / "model-m-isolation.csv", index=False)
    page = _whole_model("model-m", tmp_path)
    assert "No GEMM's time inside its layer here" in page and "isolation_model-m" not in page
    pd.DataFrame([gap | {"inside_s": 3e-4, "isolation_gap": 1.5}]).to_csv(
        tmp_path / "model-m-isolation.csv", index=False
    )
    page = _whole_model("model-m", tmp_path)
    assert "No GEMM's time inside" not in page and "isolation_model-m" in page


def test_a_model_figure_of_no_rows_yet_is_drawn_empty_not_a_traceback():
    """A sweep whose GEMM cases all failed or were not asked for still gets its report (the failure path)."""
    import pandas as pd

    from neuronsweep.report import figures

    empty = pd.DataFrame(columns=["phase", "batch", "seq", "dtype", "gemm", "gemm_time_s", "count", "share_pct"])
    assert figures.model_rollup(empty).data == ()


def test_a_framework_table_without_its_intervals_is_one_sentence_not_a_split(tmp_path):
    """A schema whose FrameworkInstruction lacks time_intervals (a later Neuron Explorer): the schema check
    names the field, and the split is null with the column named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuronsweep.analysis import derived
    from neuronsweep.formats import profile_schema
    from neuronsweep.formats.profile_db import ProfileDB

    folder = tmp_path / "view" / "parquet"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"framework_name": "L[0]/aten.mm"}]), folder / "FrameworkInstruction.parquet")
    db = ProfileDB()
    db.load_view(folder.parent, "case")
    db.finish()
    assert derived.framework_ops(db) == (None, "the profile's FrameworkInstruction table has no time_intervals column")
    assert profile_schema.problems(db, "12.0.1") == [
        "profile schema 12.0.1: the FrameworkInstruction table has no time_intervals column, so a layer's split by "
        "category is not read from it; send view/profile-schema.txt with a bug report"
    ]
