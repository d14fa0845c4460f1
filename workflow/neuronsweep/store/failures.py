"""Failures as data: a stage that fails writes <case>/logs/<stage>.error.json (stage, case, one-sentence
reason, exception type), which aggregate and status read, so one failed case never hides the others."""

from __future__ import annotations

import json
import time
from pathlib import Path

from neuronsweep.atomic import write_json

STAGES = ("build", "capture", "view", "extract")


def failure_path(case_dir: Path, stage: str) -> Path:
    """Where a stage's failure record of this case lives (logs/<stage>.error.json)."""
    return Path(case_dir) / "logs" / f"{stage}.error.json"


def record_failure(case_dir: Path, stage: str, case: str, reason: str, exception: str) -> None:
    """Write the stage's failure record: the case, the one-sentence reason, the exception, when."""
    write_json(
        failure_path(case_dir, stage),
        {"stage": stage, "case": case, "reason": reason, "exception": exception, "unix": time.time()},
    )


def clear_failure(case_dir: Path, stage: str) -> None:
    """Remove the stage's failure record once it has succeeded."""
    failure_path(case_dir, stage).unlink(missing_ok=True)


def latest_failure(case_dir: Path) -> dict | None:
    """The most recent stage failure recorded for a case, or None."""
    found = []
    for stage in STAGES:
        path = failure_path(case_dir, stage)
        if path.is_file():
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
    return max(found, key=lambda f: f.get("unix", 0), default=None)
