"""`neuronsweep doctor --field-test` on the stand-in of a trn2 with SDK 2.33 (TorchNeuron and NKI): the full
table of contracts, and the bundle a user attaches to a bug report."""

from __future__ import annotations

import tarfile

import pytest

CONTRACTS = (
    "NEFF attribution",
    "NTFF names",
    "LNC consistent",
    "summary keys and units",
    "view parquet",
    "view json",
    "view perfetto",
    "schema version",
    "parquet columns we read",
    "framework ops",
    "MFU recomputed = tool's",
    "device time vs framework",
    "correctness",
    "input names",
    "inspect layout",
    "compiler command line",
)
NEW_LINES = ("users-kernel: keyword params", "nki: NKI on trn2", "users-kernel: NKI on trn2")


@pytest.mark.slow
@pytest.mark.workflow  # runs the real workflow on the stand-in (conftest.field_test)
def test_field_test_prints_every_contract_and_writes_the_bundle(field_test):
    """One NKI kernel miscompiled (STANDIN_NKI_WRONG: 10 % off) fails its correctness line and the exit
    status; every other contract of both routes passes or is skipped with the reason. The collective's NEFF
    is refused by the profiler (STANDIN_FAIL_MATCH), so its ranks go through the runtime's inspect mode."""
    stdout = field_test["stdout"]
    lines = [line for line in stdout.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert field_test["returncode"] == 1, stdout + field_test["stderr"]
    assert lines[0].startswith("PASS  route detection") and "torchneuron" in lines[0]
    for route in ("torchneuron", "nki", "collective"):
        named = [line for line in lines if f" {route}: " in line]
        assert [c for c in CONTRACTS if not any(f"{route}: {c}" in line for line in named)] == []
    by_contract = {line[6:].split("  ")[0].strip(): line[:4] for line in lines}
    assert by_contract["collective: per-rank NEFFs"] == "PASS" and by_contract["collective: inspect layout"] == "PASS"
    assert by_contract["collective: cc_op_time"] == "SKIP"  # its inspect session holds every execution
    assert by_contract["nki: LNC per process"] == "PASS"
    # the miscompiled kernel's wrong output leaves its device loop unconfirmed (a right one: the test below)
    loops = next(line for line in lines if "nki: NKI loops" in line)
    assert loops.startswith("SKIP") and "nl.fori_loop over the outer tiles" in loops and "not confirmed" in loops
    body = next(line for line in lines if "nki: NKI loop body" in line)  # docs silent on a tile's liveness
    assert body.startswith("SKIP") and "live per partition, of the 229376 and 16384 on trn2" in body, body
    assert by_contract["torchneuron: inspect layout"] == "SKIP"  # the profiler took its NEFF
    # TorchNeuron compiled with the HLO debug variables, as the docs recommend for every capture method: the
    # stand-in's NEFF names its framework ops and the profile maps time to them
    assert by_contract["torchneuron: framework ops"] == "PASS"
    # what the docs leave open of the headroom's tables, settled on the profile: the trn2 stand-in runs at LNC 2,
    # its summary's TensorE time the union of both cores' ActiveTime; it never throttles (no row to compare)
    assert by_contract["torchneuron: LNC 2 active"] == "PASS"
    assert by_contract["torchneuron: throttle unit"] == "SKIP"
    assert by_contract["torchneuron: HBM types"] == "PASS"
    assert by_contract["torchneuron: SbufUsage unit"] == by_contract["torchneuron: PsumUsage unit"] == "PASS"
    # the user's NKI kernel of config/examples/kernels, its keyword param passed by name; the stand-in's
    # miscompile is in every NKI matmul, so its output check fails too
    verdict = {c: next(line[:4] for line in lines if line[6:].startswith(c)) for c in NEW_LINES}  # no padding left
    assert set(verdict.values()) == {"PASS"}, verdict
    assert "tile_n=256 by name" in next(line for line in lines if "users-kernel: keyword params" in line)
    shape = next(line for line in lines if "neuron-ls JSON shape" in line)
    assert shape.startswith("PASS") and "a list of 1; read 1 device(s)" in shape, shape  # the 2.33 stand-in's
    failed = [line for line in lines if line.startswith("FAIL")]
    assert sorted(line[6:].split(":")[0] for line in failed) == ["nki", "users-kernel"]
    assert all("correctness" in line and "(tolerance 0.03)" in line for line in failed), failed
    assert any(line.startswith("SKIP  nki: device time vs framework") for line in lines)  # NKI: no framework
    with tarfile.open(field_test["out"] / "field-test.tar.gz") as tar:
        names = tar.getnames()
    assert "field-test/field-test.txt" in names and "field-test/snakemake.log" in names
    assert any(n.endswith("/view/view.json") for n in names) and any(n.endswith("profile-schema.txt") for n in names)
    assert not [n for n in names if n.endswith((".neff", ".ntff", ".npy", ".bin", ".parquet", ".pftrace"))]


def test_the_cc_op_time_line_passes_ranks_whose_summaries_time_their_collectives(tmp_path):
    """A forward across ranks on neuron reads each rank's time in collectives from its summary's cc_op_time:
    the line fails a rank whose summary lacks it or holds more than its total_time."""
    import json

    from neuronsweep.fieldtest import collective_time_line

    def line(*summaries: dict) -> str:
        for r, s in enumerate(summaries):
            (tmp_path / "view" / "ranks" / f"rank_{r}").mkdir(parents=True, exist_ok=True)
            (tmp_path / "view" / "ranks" / f"rank_{r}" / "summary.json").write_text(json.dumps(s))
        return str(collective_time_line(tmp_path, "collective", {}))

    assert line({"cc_op_time": 1e-5, "total_time": 2e-5}, {"cc_op_time": 2e-5, "total_time": 2e-5}).startswith("PASS")
    assert line({"cc_op_time": 1e-5, "total_time": 2e-5}, {"total_time": 2e-5}).startswith("FAIL")
    assert line({"cc_op_time": 3e-5, "total_time": 2e-5}, {"cc_op_time": 1e-5, "total_time": 2e-5}).startswith("FAIL")


def test_the_ranks_cc_op_timeline_line_says_what_the_alignment_rests_on():
    """The line passes a timeline made of every rank's operations, and fails one whose ranks ran different
    counts or lacked the optional trigger_start_ts, printing why."""
    from neuronsweep.fieldtest import rank_timeline_line

    aligned = {"instances": 4, "ranks": 2, "offsets_s": [0.0, -0.0015], "residual_s": 2e-7, "notes": []}
    assert str(rank_timeline_line({"rank_timeline": aligned}, "fwd")).startswith("PASS")
    assert "-1500.0 us" in str(rank_timeline_line({"rank_timeline": aligned}, "fwd"))
    uneven = aligned | {"notes": ["the ranks ran 5, 4 collective operations: the first 4 are aligned"]}
    assert str(rank_timeline_line({"rank_timeline": uneven}, "fwd")).startswith("FAIL")
    why = {"why": "rank(s) 1' CcOp rows lack trigger_start_ts"}
    assert str(rank_timeline_line({"rank_timeline": why}, "fwd")).startswith("FAIL")
    assert str(rank_timeline_line({}, "fwd")).startswith("SKIP")


def test_the_nki_loops_line_passes_only_a_device_loop_whose_output_is_right(tmp_path):
    from neuronsweep.fieldtest import nki_loops_line

    fori = "nl.fori_loop over the outer tiles (scalar_offset addressing), Python range inside"
    right, wrong = {"nki_loops": fori, "correctness": {"correct": True}}, {"nki_loops": fori, "correctness": {}}
    assert nki_loops_line("nki", right, "").verdict == "PASS"
    assert "its output matches numpy" in nki_loops_line("nki", right, "").detail
    assert nki_loops_line("nki", wrong, "").verdict == "SKIP"
    warned = "DeprecationWarning: nl.affine_range is deprecated in NKI 0.7 and defaults to Python range"
    assert nki_loops_line("nki", right, warned).verdict == "FAIL"
    # a deprecation of something else (SDK 2.34's own warnings, a library's) is not a range iterator's
    other = "FutureWarning: neuronxcc.nki is deprecated and removed in 2.34; use nki"
    assert nki_loops_line("nki", right, other).verdict == "PASS"
    older = {"nki_loops": "nl.affine_range", "correctness": {"correct": False}}  # before 0.7: no device loop to confirm
    assert nki_loops_line("nki", older, "").verdict == "PASS"


def test_the_nki_loop_body_line_shows_what_a_body_keeps_on_chip_beside_the_targets_partition():
    from neuronsweep.fieldtest import nki_body_line

    spec = {"kind": "matmul", "m": 256, "k": 128, "n": 512, "dtype": "bf16", "impl": "nki"}
    line = nki_body_line("nki", {"spec": spec, "target": "trn3", "correctness": {"correct": True}})
    assert line.verdict == "PASS" and "4608 B of SBUF and 4096 B of PSUM" in line.detail  # 2(128 + 512)2 + 2(512)2
    assert "of the 262144 and 16384 on trn3 (NeuronCore-v4" in line.detail and "the compiler built it" in line.detail


def test_the_framework_ops_line_reads_the_table_a_layers_split_needs_and_fails_one_the_build_asked_for(tmp_path):
    """A profile with a FrameworkInstruction table passes with its split; one without fails where the NEFF was
    compiled with the HLO debug variables (the docs say it then has one) and is skipped where it was not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuronsweep.fieldtest import framework_ops_line
    from neuronsweep.formats.profile_db import ProfileDB

    def db(tables: dict) -> ProfileDB:
        folder = tmp_path / str(len(list(tmp_path.iterdir()))) / "view" / "parquet"
        folder.mkdir(parents=True)
        for name, rows in tables.items():
            pq.write_table(pa.Table.from_pylist(rows), folder / f"{name}.parquet")
        loaded = ProfileDB()
        loaded.load_view(folder.parent, "case")
        loaded.finish()
        return loaded

    summary, debug = {"total_time": 1e-6}, {"env": {"XLA_HLO_DEBUG": "1"}}
    ops = [
        {"framework_name": "LlamaDecoderLayer[0]/LlamaAttention[0]/Linear[0]/aten.mm", "time_intervals": "[[0, 300]]"},
        {"framework_name": "LlamaDecoderLayer[0]/LlamaRMSNorm[0]/aten.mul", "time_intervals": "[[300, 400]]"},
    ]
    line = framework_ops_line(db({"FrameworkInstruction": ops, "Summary": [summary]}), "xla", debug, summary)
    assert line.verdict == "PASS" and "2 framework ops" in line.detail
    assert "'gemm': 0.3, 'norm': 0.1, 'other': 0.6" in line.detail, line.detail
    bare = db({"Summary": [summary]})
    assert framework_ops_line(bare, "xla", debug, summary).verdict == "FAIL"
    assert framework_ops_line(bare, "torchneuron", {"env": {}}, summary).verdict == "SKIP"
    skipped = framework_ops_line(bare, "torchneuron", debug, summary)  # a finding there: the docs show no table
    assert skipped.verdict == "SKIP" and "TorchNeuron's NEFF has none" in skipped.detail
    wrong = [{"framework_name": "L[0]/aten.mm", "time_intervals": "[[0]]"}]
    line = framework_ops_line(db({"FrameworkInstruction": wrong}), "xla", debug, summary)
    assert line.verdict == "FAIL" and "unreadable" in line.detail


def test_the_dma_metadata_line_fails_a_profile_that_still_warns_dge_is_missing():
    """With DGE notifications on (the default), a real device's profile must not carry the warning the real
    inf2 profiles captured without them do; where there is no warnings list, or DGE was off, it says why."""
    from neuronsweep.fieldtest import dge_line

    warned = {"profile_warnings": ["Missing Data: Missing additional dynamic DMA metadata, reported DMA values ..."]}
    assert dge_line(warned, "xla", {"dge_notifications": True}).verdict == "FAIL"
    assert dge_line({"profile_warnings": []}, "xla", {"dge_notifications": True}).verdict == "PASS"
    assert dge_line({"profile_warnings": None}, "xla", {}).verdict == "SKIP"
    assert dge_line(warned, "xla", {"dge_notifications": False}).verdict == "SKIP"
