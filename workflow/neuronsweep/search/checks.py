"""A config's searches and tunes checked as their drivers will build them, before any job: the Snakefile
(workflow/rules/common.smk) and `neuronsweep plan` call `check` before the plan, so a bad search or tune
block (a default outside its space, a candidate no custom entry names, inputs that are not two matrices)
is one sentence at the start, neither after the sweep when its rule runs nor after the plan's probes (the
host's, a model's trace: tens of seconds)."""

from __future__ import annotations

from neuronsweep.config.suites import ConfigDocument
from neuronsweep.search import build, searches


def check(cfg: ConfigDocument, source: str) -> None:
    """Build every search and tune of a validated config (a UserError names the first bad one)."""
    for kind, entry in searches(cfg).values():
        build(kind, cfg, entry, source)
