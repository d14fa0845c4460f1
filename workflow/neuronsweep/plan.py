"""Expand the config's suites into scenarios (rows the user asked for) and unique workloads.

Two scenarios that reduce to the same workload share one build and one capture; the plan keeps
both rows and points them at the same workload id.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

from .workloads import matmul, workload_id


@dataclass(frozen=True)
class Scenario:
    id: str
    suite: str
    workload_id: str
    labels: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Plan:
    run: str
    scenarios: list[Scenario]
    workloads: dict[str, dict]  # workload id -> spec, sorted by id

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "counts": {"scenarios": len(self.scenarios), "workloads": len(self.workloads)},
            "scenarios": [asdict(s) for s in self.scenarios],
            "workloads": self.workloads,
        }


def _matmul_scenarios(suite: dict) -> list[tuple[Scenario, dict]]:
    shapes = []
    if "grid" in suite:
        g = suite["grid"]
        shapes += [dict(m=m, k=k, n=n) for m, k, n in itertools.product(g["m"], g["k"], g["n"])]
    shapes += [dict(s) for s in suite.get("shapes", [])]
    out = []
    for shape, dtype in itertools.product(shapes, suite["dtype"]):
        spec = matmul.spec(dtype=dtype, **shape)
        wid = workload_id(spec)
        out.append((Scenario(id=wid, suite="matmul", workload_id=wid, labels={**shape, "dtype": dtype}), spec))
    return out


SUITES = {"matmul": _matmul_scenarios}


def make_plan(config: dict) -> Plan:
    """Plan a validated config (see config.validate)."""
    scenarios: dict[str, Scenario] = {}
    workloads: dict[str, dict] = {}
    for suite_name, suite in config["suites"].items():
        for sc, spec in SUITES[suite_name](suite):
            scenarios.setdefault(sc.id, sc)  # the same row asked twice (grid and shapes) is one row
            workloads[sc.workload_id] = spec
    ordered = sorted(scenarios.values(), key=lambda s: (s.suite, s.id))
    return Plan(run=config["run"], scenarios=ordered, workloads=dict(sorted(workloads.items())))
