"""The build's compile time and count, whether the cache served it, and recompilation from either
signal: a second call with the same inputs compiled again, or compiles during the timed runs."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.store.records import BuildRecord


@dataclass(kw_only=True)
class Compilation(Part):
    """Compile time and count, whether the compile cache served the build, and whether the workload compiled again."""

    compile_s: float | None
    compile_count: int | None
    cache_hit: bool | None
    recompilation_detected: bool | None


def compilation(build: BuildRecord | None, backend: str, recompiles_during_timing: int | None) -> Compilation:
    """The build record's compile facts; recompilation from either signal (a repeated call compiled, or the timed runs
    did)."""
    notes: dict[str, str] = {}
    compile_s = build.compile_s if build else None
    count = build.compile_count if build else None
    if not build:
        notes["compile_s"] = notes["cache_hit"] = "no build.json given"
    elif compile_s is None:
        notes["compile_s"] = build.compile_s_source or "the build did not time its compile"
    if count is None:
        notes["compile_count"] = f"the {build.compiler if build else backend} build does not count compiles"
    signals = [
        s
        for s in (
            build.recompiled_on_second_call if build else None,
            None if recompiles_during_timing is None else recompiles_during_timing > 0,
        )
        if s is not None
    ]
    if not signals:
        notes["recompilation_detected"] = f"the {backend} backend has no compile counter or repeated-call check"
    return Compilation(
        compile_s=compile_s,
        compile_count=count,
        cache_hit=build.cache.get("hit") if build else None,
        recompilation_detected=any(signals) if signals else None,
        notes=notes,
    )
