"""plan.json as the plan stage writes it (stages/plan.Plan.to_dict and run_setup.RunSetup.plan_json), typed for
the stages and commands that read it back (aggregate, report, status, compare)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from neuronsweep.config.suites import ConfigDocument
from neuronsweep.store.specs import Spec


class PlanCounts(TypedDict):
    """How many scenarios and workloads the plan has, and how many this backend cannot run."""

    scenarios: int
    workloads: int
    unsupported: int


class PlanDocument(TypedDict):
    """The run's plan: its scenarios (stages/plan.Scenario's fields), the workloads to build and capture by id,
    those this backend cannot run with why, and what the run settled (backend, neuron setup, the config)."""

    run: str
    backend: str
    counts: PlanCounts
    scenarios: list[dict[str, Any]]  # id, suite, workload_id, labels, kind
    workloads: dict[str, Spec]
    unsupported: dict[str, str]
    backend_reason: NotRequired[str]
    neuron_setup: NotRequired[dict[str, Any]]
    config: NotRequired[ConfigDocument]
