"""The stage records (build.json, capture.json, view.json, metrics.json): one typed class each, with one
writer (`write`) and one reader (`read`).

A record's fields that a later stage or the report reads are typed attributes; what a backend records
only for itself or for the user (argv, toolchain versions, its environment) stays in `details`. On disk
each record is the same flat JSON object as before, so a user's `jq .compile_s build.json` keeps working.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NotRequired, Self, TypedDict

from neuronsweep import __version__
from neuronsweep.atomic import write_json
from neuronsweep.config.settings import HOST_ENV, CaptureSettings, Collectives
from neuronsweep.errors import UserError
from neuronsweep.store.cache import file_sha256
from neuronsweep.store.layer_split import LayerSplitRecord
from neuronsweep.store.specs import Spec


def _command() -> str:
    """The exact command, with the host settings the workflow passed through the environment."""
    host = os.environ.get(HOST_ENV)
    return (f"{HOST_ENV}={shlex.quote(host)} " if host else "") + shlex.join(["neuronsweep", *sys.argv[1:]])


def provenance(stage: str, started: float) -> dict[str, str | float]:
    """When, how long and with which exact command a stage ran (every record carries it)."""
    return {
        "stage": stage,
        "wall_s": time.time() - started,
        "started_unix": started,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "command": _command(),
        "neuronsweep_version": __version__,
    }


def _load(path: Path, what: str, stage: str) -> dict:
    if not path.is_file():
        raise UserError(f"{path}: no {what}; run the {stage} stage for this case first.")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: not a readable {what} ({exc}); rerun the {stage} stage for this case "
            f"(snakemake --forcerun {stage} ...)."
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a {what} (a JSON object was expected); rerun the {stage} stage for this case.")
    return data


@dataclass
class StageRecord:
    """What a stage writes about one case (build.json, capture.json, view.json): typed fields the stages read, the
    backend's own fields in details, and provenance, all flat in the JSON."""

    STAGE: ClassVar[str]
    FILE: ClassVar[str]

    workload_id: str
    backend: str
    spec: Spec | None
    details: dict = field(default_factory=dict)  # the backend's own fields, flat in the JSON
    provenance: dict = field(default_factory=dict)  # see provenance(); flat in the JSON too

    @classmethod
    def create(cls, started: float, **fields: object) -> Self:
        """A record of a stage that began at `started` (time.time()): typed fields by name, the rest details."""
        return cls.from_json({**fields, **provenance(cls.STAGE, started)})

    @classmethod
    def from_json(cls, data: dict) -> Self:
        """The record from its flat JSON object: typed fields by name, provenance, the rest details."""
        names = {f.name for f in dataclasses.fields(cls)} - {"details", "provenance"}
        typed = {k: v for k, v in data.items() if k in names}
        prov_keys = ("stage", "wall_s", "started_unix", "started_at", "command", "neuronsweep_version")
        prov = {k: data[k] for k in prov_keys if k in data}
        details = {k: v for k, v in data.items() if k not in names and k not in prov_keys}
        missing = sorted(
            names
            - typed.keys()
            - {
                f.name
                for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            }
        )
        if missing:
            raise UserError(
                f"a {cls.STAGE} record lacks {', '.join(missing)}; rerun the {cls.STAGE} stage for this case."
            )
        return cls(**cls._typed(typed), details=details, provenance=prov)

    @classmethod
    def _typed(cls, typed: dict) -> dict:
        return typed

    def to_json(self) -> dict:
        """The record as its flat JSON object."""
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("details", "provenance")
        }
        out = {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in out.items()}
        return {
            "stage": self.STAGE,
            **out,
            **self.details,
            **{k: v for k, v in self.provenance.items() if k != "stage"},
        }

    def write(self, out_dir: Path) -> Path:
        """Write the record into out_dir atomically; returns its path."""
        path = Path(out_dir) / self.FILE
        write_json(path, self.to_json())
        return path

    @classmethod
    def read(cls, where: Path) -> Self:
        """The record in `where` (its stage directory) or at `where` (the file)."""
        where = Path(where)
        path = where if where.suffix == ".json" else where / cls.FILE
        return cls.from_json(_load(path, f"{cls.STAGE} record", cls.STAGE))


@dataclass
class BuildRecord(StageRecord):
    """build.json: the spec, toolchain, artifact and compile facts of one case's build."""

    STAGE: ClassVar[str] = "build"
    FILE: ClassVar[str] = "build.json"

    spec: Spec  # every build is of a workload (a capture of a NEFF alone has none)
    artifact: str = ""
    artifact_sha256: str | None = None  # of the artifact as built or fetched, checked before each capture
    artifact_bytes: int | None = None
    compiler: str = ""
    cache: dict = field(default_factory=dict)  # cache.CompileCache.through's record: key, hit, entry, sha256
    compile_s: float | None = None
    compile_s_source: str | None = None  # where compile_s comes from, or why there is none
    compile_count: int | None = None
    recompiled_on_second_call: bool | None = None
    recompilation_flag: str | None = None  # the warning sentence when it did
    target: str | None = None  # neuron: the configured NeuronCore target
    lnc: int | None = None  # neuron: logical NeuronCore config
    pjrt_device: str | None = None  # xla
    env: dict = field(default_factory=dict)  # what the capture must set again (compile flags, caches)

    def verify_artifact(self, build_dir: Path) -> Path:
        """The artifact beside this record, refused when it is not the one built: Snakemake judges files
        by time, so a damaged or replaced artifact would otherwise look up to date and be captured."""
        path = Path(build_dir) / self.artifact
        if not path.is_file():
            raise UserError(f"case {self.workload_id}: {path} is missing; run snakemake again (it rebuilds it).")
        if self.artifact_sha256 and (
            path.stat().st_size != self.artifact_bytes or file_sha256(path) != self.artifact_sha256
        ):
            raise UserError(
                f"case {self.workload_id}: {path} is not the artifact its build recorded (its sha256 "
                f"differs: changed or damaged since); delete it and run snakemake again, which rebuilds "
                f"only this case."
            )
        return path


@dataclass
class CaptureRecord(StageRecord):
    """capture.json: the profile and the timed executions of one case."""

    STAGE: ClassVar[str] = "capture"
    FILE: ClassVar[str] = "capture.json"

    settings: CaptureSettings | None = None
    profiler: str | None = None
    latency: dict | None = None  # stats.latency_stats over the timed runs
    latency_note: str | None = None  # why there is no latency
    threads: int | None = None
    single_io: bool | None = None  # neuron: captured with --single-io after a device OOM
    device_span: dict | None = None  # devicelock.held: when the device was held, by whom
    host_load: dict | None = None  # caps.LoadWatch: the host at start and end, and the verdict
    layer_split: LayerSplitRecord | None = None  # a layer case's time by category, where the capture measures it
    layer_split_why: str | None = None  # why a layer case's capture has none

    def captured_with(self) -> CaptureSettings:
        """The settings it was captured with; a record that keeps none is one sentence, not an AttributeError."""
        if self.settings is None:
            raise UserError(
                f"case {self.workload_id}: its capture record keeps no capture settings; rerun the capture stage "
                "for this case."
            )
        return self.settings

    @classmethod
    def _typed(cls, typed: dict) -> dict:
        if typed.get("layer_split") is not None and not isinstance(typed["layer_split"], LayerSplitRecord):
            typed = {**typed, "layer_split": LayerSplitRecord.from_dict(typed["layer_split"], cls.FILE)}
        if isinstance(typed.get("settings"), dict):
            try:
                typed = {**typed, "settings": CaptureSettings(**typed["settings"])}
            except TypeError:  # another neuronsweep version's settings
                raise UserError(
                    "a capture record's settings are not this version's "
                    f"({', '.join(sorted(typed['settings']))}); rerun the capture stage for this case."
                ) from None
        return typed


class CaptureFields(TypedDict, total=False):
    """What a backend's capture returns: capture.json's fields (CaptureRecord's typed ones, the rest details).
    Nested records (the latency statistics, the correctness, the device's span) are typed where they are made
    (analysis/stats.LatencyStats, analysis/correctness.Correctness, host/devicelock.Span)."""

    # every backend
    profiler: str | None
    latency: Any  # analysis/stats.LatencyStats and the backend's own fields beside it; None with latency_note
    latency_note: str
    latency_basis: str  # what one sample is (ranks: the slowest rank's time per execution)
    round_pids: list[int] | None
    threads: int | None
    correctness: Any  # analysis/correctness.Correctness
    host: dict[str, str]
    artifacts: dict[str, str]  # what -> file beside capture.json
    device_span: Any  # host/devicelock.Span
    layer_split: Any  # store/layer_split.LayerSplitRecord, or its JSON
    layer_split_why: str | None
    # cpu
    profiler_flops: int
    warmup_min_s: float
    working_set_bytes: int
    # xla
    module: str
    module_matches_build: bool
    module_note: str | None
    capture_compile: Any  # backends/programs/xla_program.Compiles
    device: str
    # ranks (gloo, neuron's collectives and forwards)
    ranks: list[dict[str, Any]]
    process_group_backend: str
    oversubscribed: str | None
    rank_timeline: dict[str, Any]
    rank_waits: list[dict[str, Any]]
    rank_latency: list[dict[str, Any]]
    forward_across_ranks: dict[str, Any]  # a forward's calls, and its waits where the ranks' times tell them
    rank_timeline_why: str
    nccom_test: Any  # backends/nccom_test.Anchor: its figures at this size, or why there are none
    # neuron: the profiler's capture
    profiler_version: str | None
    argv: list[str] | None
    dge_notifications: bool
    exit_status: int
    stderr_tail: str
    capture_wall_s: float
    neff: str
    neff_sha256: str
    ntff: str
    ntff_written_as: str
    ntffs_written: list[str]
    collectives: Collectives | None
    single_io: bool
    outputs_valid: bool
    inputs: str | list[tuple[str, str]]  # what the profiled execution ran on: the NEFF's own, or files given
    runtime_lnc: int | None
    # neuron: the runtime's inspect mode, where the profiler cannot run the NEFF
    capture_refused: str
    inspect_mode: str
    inspect_modes_tried: dict[str, str]
    inspect_env: dict[str, str]
    profile_scope: str
    session_dir: str
    written_as: str


class SchemaFacts(TypedDict):
    """The profile schema a neuron view read, and the tool that wrote it (view.json)."""

    profiler_version: str | None
    profile_schema_version: str | None
    profile_schema_dump: str | None  # the tool's own schema dump beside the view, where it printed one
    profile_schema_version_why: NotRequired[str]


class RankView(TypedDict):
    """One profiled rank's view (view.json's `ranks`)."""

    rank: int
    summary: str  # its summary.json, relative to the view folder
    nc_idx: Any
    nd_idx: Any
    total_time: Any


class SessionView(TypedDict):
    """The combined view of every rank (`view -d`): the command and the traces it wrote."""

    argv: list[str]
    system_pftrace: str
    device_pftraces: list[str]


class ViewFields(TypedDict, total=False):
    """What a backend's view returns: view.json's fields (ViewRecord's, the rest details) and the summary,
    which the view stage writes as summary.json."""

    summary: dict[str, Any]  # the profile's flat summary (formats/neuron_summary.py); the rank timeline has none
    profiler: str
    profiler_version: str | None  # SchemaFacts'
    profile_schema_version: str | None
    profile_schema_dump: str | None
    profile_schema_version_why: str
    commands: dict[str, list[str]]  # format -> the view's command
    outputs: dict[str, str]  # format -> file written beside summary.json
    skipped: dict[str, str]  # format -> why it was not written
    pftrace: str | None
    pftrace_counts: dict[str, int]
    hlo_instructions: int  # xla: the HLO module's instructions, as a table
    ranks: list[RankView]
    rank_timeline: dict[str, object]  # analysis/device_collectives.DeviceRanks.summary
    ranks_pftrace: str
    session: SessionView | None
    session_why: str


@dataclass
class ViewRecord(StageRecord):
    """view.json: what the view wrote from the capture (summary, pftrace, tables)."""

    STAGE: ClassVar[str] = "view"
    FILE: ClassVar[str] = "view.json"

    profiler: str | None = None
    outputs: dict = field(default_factory=dict)  # format -> file written beside summary.json
    pftrace: str | None = None


@dataclass
class MetricsRecord:
    """metrics.json: the normalized metrics of one workload (docs/metrics.md). Scalars are `values`; a
    null value has its reason in `notes`."""

    FILE: ClassVar[str] = "metrics.json"

    values: dict
    notes: dict
    spec: dict | None
    provenance: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """metrics.json's object: the values, spec, notes and provenance."""
        return {**self.values, "spec": self.spec, "notes": self.notes, "provenance": self.provenance}

    def write(self, path: Path) -> Path:
        """Write metrics.json atomically; returns its path."""
        write_json(path, self.to_json())
        return Path(path)

    @classmethod
    def read(cls, path: Path) -> MetricsRecord:
        """Read metrics.json; one sentence naming the stage to run when it is missing or damaged."""
        data = _load(Path(path), "metrics record", "extract")
        return cls(
            values={k: v for k, v in data.items() if k not in ("spec", "notes", "provenance")},
            notes=data.get("notes") or {},
            spec=data.get("spec"),
            provenance=data.get("provenance") or {},
        )


@dataclass(frozen=True)
class Timing:
    """One case's timed samples, and its round medians when each round ran in a fresh process of its
    own (then the process is what analysis/verdict.py tests). `paired`: each round's process timed the
    other side of a comparison too, in alternation (compare's rounds, runs/interleave.py), so round i
    of both sides shares one moment and the test is on their ratios."""

    samples: list[float]
    rounds: list[float] | None = None
    paired: bool = False
    basis: str | None = None  # capture.json's latency.samples_are ("device times": an NKI kernel's); None: wall clock

    def scaled(self, factor: float) -> Timing:
        """The same timing in other units (every sample and round median times factor)."""
        rounds = self.rounds and [r * factor for r in self.rounds]
        return Timing([s * factor for s in self.samples], rounds, self.paired, self.basis)

    def __len__(self) -> int:
        return len(self.samples)


def timing(workload_dir: Path) -> Timing | None:
    """Every timed sample of a case's capture (all rounds), and the round medians when each round ran
    in a process of its own, for the tests of compare, history and the ranking; None when the capture
    recorded no samples (a device time only) or cannot be read: the case is then not judged, and the
    rest of the run still is."""
    try:
        latency = json.loads((Path(workload_dir) / "capture" / CaptureRecord.FILE).read_text()).get("latency") or {}
        samples = [float(s) for s in latency.get("samples_s") or []]
        rounds = [float(r) for r in latency.get("round_medians_s") or []] if latency.get("rounds_in_processes") else []
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    samples = [s for s in samples if math.isfinite(s) and s > 0]
    rounds = [r for r in rounds if math.isfinite(r) and r > 0]
    basis = latency.get("samples_are") if isinstance(latency.get("samples_are"), str) else None
    return Timing(samples, rounds or None, basis=basis) if samples else None
