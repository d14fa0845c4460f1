"""Autotune (`neuronsweep search`, docs/autotune.md): `driver` runs a search's rounds as Snakemake calls
and judges its finalists, `space` is the space and the strategies as Optuna sees them (and the replay that
resumes a search), `page` draws search.html; `tune` tunes a model (a search per GEMM shape and candidate,
the winners judged against the compiler's build), `dispatch` reads its table back, `tune_page` draws
tune.html; `checks` builds every search and tune of a config before any job. Above the stages and runs
it drives; `searches` (here, light) tells a config that has none apart before any of them is imported."""

from __future__ import annotations

from neuronsweep.errors import UserError

FINALIST_ROUNDS = 5  # processes that time the finalists again (cpu): enough for verdict's t-test


def searches(cfg: dict) -> dict[str, tuple[str, dict]]:
    """Every search of a config by name: (kind, entry). "custom": a suites.custom entry with a search:
    block (its params); "config": a top-level search: entry (dotted config keys, a run per trial);
    "tune": a suites.model entry with a tune: block (search/tune.py)."""
    found: dict[str, tuple[str, dict]] = {}
    for kind, entries in (
        ("custom", [e for e in cfg["suites"].get("custom", []) if e.get("search")]),
        ("config", [{"name": b["name"], "search": b} for b in cfg.get("search", [])]),
        ("tune", [e for e in cfg["suites"].get("model", []) if e.get("tune")]),
    ):
        for entry in entries:
            if entry["name"] in found:
                raise UserError(f"two searches are named {entry['name']}; rename one.")
            found[entry["name"]] = (kind, entry)
    return found
