"""Expand the config's suites into scenarios (rows the user asked for) and unique workloads.

Two scenarios that reduce to the same workload share one build and one capture; the plan keeps
both rows and points them at the same workload id.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

from .workloads import kind_of, matmul, workload_id


@dataclass(frozen=True)
class Scenario:
    id: str
    suite: str
    workload_id: str
    labels: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Plan:
    run: str
    backend: str
    scenarios: list[Scenario]
    workloads: dict[str, dict]  # workload id -> spec, sorted by id: what gets built and captured
    unsupported: dict[str, str]  # workload id -> why this backend cannot run it (no jobs, a CSV row)

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "backend": self.backend,
            "counts": {"scenarios": len(self.scenarios), "workloads": len(self.workloads),
                       "unsupported": len(self.unsupported)},
            "scenarios": [asdict(s) for s in self.scenarios],
            "workloads": self.workloads,
            "unsupported": self.unsupported,
        }


def _matmul_scenarios(suite: dict) -> list[tuple[Scenario, dict]]:
    shapes = []
    if "grid" in suite:
        g = suite["grid"]
        shapes += [dict(m=m, k=k, n=n) for m, k, n in itertools.product(g["m"], g["k"], g["n"])]
    shapes += [dict(s) for s in suite.get("shapes", [])]
    out = []
    for shape, dtype, impl in itertools.product(shapes, suite["dtype"], suite["impl"]):
        spec = matmul.spec(dtype=dtype, impl=impl, **shape)
        wid = workload_id(spec)
        labels = {**shape, "dtype": dtype, "impl": impl}
        out.append((Scenario(id=wid, suite="matmul", workload_id=wid, labels=labels), spec))
    return out


SUITES = {"matmul": _matmul_scenarios}


def make_plan(config: dict, backend: str) -> Plan:
    """Plan a validated config (see config.validate) for the backend that will run it."""
    scenarios: dict[str, Scenario] = {}
    workloads: dict[str, dict] = {}
    unsupported: dict[str, str] = {}
    for suite_name, suite in config["suites"].items():
        for sc, spec in SUITES[suite_name](suite):
            scenarios.setdefault(sc.id, sc)  # the same row asked twice (grid and shapes) is one row
            why = kind_of(spec).unsupported(spec, backend)
            if why:
                unsupported[sc.workload_id] = why
            else:
                workloads[sc.workload_id] = spec
    ordered = sorted(scenarios.values(), key=lambda s: (s.suite, s.id))
    return Plan(run=config["run"], backend=backend, scenarios=ordered, workloads=dict(sorted(workloads.items())),
                unsupported=dict(sorted(unsupported.items())))
