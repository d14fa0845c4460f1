"""Stage records: one writer and one reader each, flat JSON on disk, damaged files named in one sentence."""

from __future__ import annotations

import json
import time

import pytest

from neuronsweep.config.settings import BuildSettings, CaptureSettings, ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.store.records import BuildRecord, CaptureRecord, MetricsRecord, ViewRecord

SPEC = {"kind": "matmul", "m": 4, "k": 8, "n": 2, "dtype": "fp32"}


def test_a_record_round_trips_through_flat_json(tmp_path):
    settings = CaptureSettings(
        warmup=1, iterations=2, repeats=1, num_exec=2, nth_exec=2, threads=1, device_lock="/tmp/x.lock", timeout_s=5
    )
    rec = CaptureRecord.create(
        time.time(),
        workload_id="w",
        backend="cpu",
        spec=SPEC,
        settings=settings,
        latency={"median_s": 1e-6},
        threads=1,
        host={"cpu": "x"},
        argv=["a"],
    )
    path = rec.write(tmp_path)
    on_disk = json.loads(path.read_text())
    # flat, as users' jq scripts expect: typed fields, the backend's own fields and provenance side by side
    assert (
        on_disk["stage"] == "capture" and on_disk["latency"] == {"median_s": 1e-6} and on_disk["host"] == {"cpu": "x"}
    )
    assert on_disk["settings"]["nth_exec"] == 2 and on_disk["command"].startswith("neuronsweep")
    back = CaptureRecord.read(tmp_path)
    assert back == rec and back.settings == settings and back.details == {"host": {"cpu": "x"}, "argv": ["a"]}


def test_missing_or_damaged_records_say_which_stage_to_run(tmp_path):
    with pytest.raises(UserError, match=r"build.json: no build record; run the build stage for this case first\."):
        BuildRecord.read(tmp_path)
    (tmp_path / "capture.json").write_text('{"stage": "capture", "workload_id"')
    with pytest.raises(UserError, match=r"capture.json: not a readable capture record .*rerun the capture stage"):
        CaptureRecord.read(tmp_path)
    (tmp_path / "view.json").write_text('{"stage": "view"}')
    with pytest.raises(UserError, match="a view record lacks backend, spec, workload_id; rerun the view stage"):
        ViewRecord.read(tmp_path)
    (tmp_path / "capture.json").write_text(
        '{"workload_id": "w", "backend": "cpu", "spec": null, "settings": {"nth": 2}}'
    )
    with pytest.raises(UserError, match=r"settings are not this version's \(nth\); rerun the capture stage"):
        CaptureRecord.read(tmp_path)
    (tmp_path / "metrics.json").write_text("[]")
    with pytest.raises(UserError, match="not a metrics record"):
        MetricsRecord.read(tmp_path / "metrics.json")


def test_settings_take_their_defaults_from_the_schema_only():
    build = BuildSettings({}).for_backend("neuron")
    assert build.options["target"] == "auto" and build.options["optlevel"] == 2 and build.timeout_s == 7200
    assert BuildSettings({"target": "inf2"}).for_backend("neuron").options["target"] == "inf2"
    assert BuildSettings({}).for_backend("cpu").options == {}
    view = ViewSettings.from_section({})
    assert (view.profiler, view.parquet, view.json, view.pftrace, view.timeout_s) == ("auto", True, False, True, 3600)


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path):
    """Results on a shared file system (FSx, EFS) are read by the team: mkstemp's private 0600 was kept
    by the rename."""
    import os
    import stat

    from neuronsweep.atomic import UMASK, write_json

    write_json(tmp_path / "r.json", {"a": 1})
    assert stat.S_IMODE(os.stat(tmp_path / "r.json").st_mode) == 0o666 & ~UMASK
