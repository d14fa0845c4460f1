"""A tune's records: what each candidate did at a shape (`Candidate`), and the tune's own progress (`TuneState`,
state.json), each built whole and written as the JSON they always were, so a tune started before them resumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from neuronsweep.atomic import read_json, write_json
from neuronsweep.search.space import Point

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass(frozen=True)
class Candidate:
    """A candidate at one shape: its best trial measured in full (`ok`), or why it has none (`failed`,
    `skipped`). A setting's compiler build at a shape is one too, its params the setting."""

    status: str
    reason: str = ""
    trials: int | None = None  # trials measured for it (a candidate skipped at a shape has none to count)
    params: Point | None = None
    median_s: float | None = None
    workload_id: str | None = None
    run: str | None = None  # the run its case is in, where not the tune's own
    folder: str | None = None  # its search's folder

    @classmethod
    def failed(cls, reason: str, trials: int | None = None, status: str = FAILED) -> Candidate:
        """One that has no trial measured in full, and why."""
        return cls(status, reason=reason, trials=trials)

    @property
    def ok(self) -> bool:
        """Whether it has a trial measured in full."""
        return self.status == OK

    def as_json(self) -> dict:
        """As state.json holds it: the keys it has."""
        return {k: v for k, v in asdict(self).items() if v is not None and (v != "" or k != "reason")}

    @classmethod
    def from_json(cls, found: dict) -> Candidate:
        """One read back from state.json."""
        return cls(**{k: found[k] for k in cls.__dataclass_fields__ if k in found})


@dataclass
class Searched:
    """A shape's searches: each candidate's outcome, and the candidates' code they ran (a digest each: a
    candidate edited since is searched again)."""

    candidates: dict[str, Candidate]
    code: dict[str, str]


@dataclass
class TuneState:
    """A tune's progress (state.json): the shapes searched, the seconds its defaults and each chunk of shapes
    took (what the budget is held against), and each call's log (bench/tune_cost.py reads it)."""

    shapes: dict[str, Searched] = field(default_factory=dict)
    defaults_s: float | None = None
    chunks_s: list[float] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> TuneState:
        """The tune's state, or a fresh one where it has none yet."""
        if not path.is_file():
            return cls()
        found = read_json(path)
        shapes = {
            sid: Searched({n: Candidate.from_json(c) for n, c in s.get("candidates", {}).items()}, s.get("code") or {})
            for sid, s in found.get("shapes", {}).items()
        }
        return cls(shapes, found.get("defaults_s"), list(found.get("chunks_s", [])), list(found.get("calls", [])))

    def write(self, path: Path) -> None:
        """state.json, as it always was."""
        shapes = {
            sid: {"candidates": {n: c.as_json() for n, c in s.candidates.items()}, "code": s.code}
            for sid, s in self.shapes.items()
        }
        out: dict = {"shapes": shapes}
        if self.defaults_s is not None:
            out["defaults_s"] = self.defaults_s
        if self.chunks_s:
            out["chunks_s"] = self.chunks_s
        if self.calls:
            out["calls"] = self.calls
        write_json(path, out)
