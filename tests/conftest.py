"""Fixtures every test file may use, and the collection hook; the helpers they are built from are in
helpers.py."""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    BIN,
    HOST_CACHE,
    made_once,
    neuron_config,
    shared_dir,
    shared_sweep,
    standin_env,
    tiny_config,
    torchneuron_env,
)

# The suite starts hundreds of Python processes on the same modules (Snakemake with the Snakefile, the
# stages, the stand-ins, pytest's rewritten test modules in each worker): they cache bytecode, as Python
# does by default, also where the environment turns that off (PYTHONDONTWRITEBYTECODE=1). Compiling every
# module again in every process cost the inner loop 12-15 % (65 s, against 55-57 s with caching, 2 cores).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture(scope="session", autouse=True)
def forked_probes():
    """The plan's probes of users' code and models forked from a process that has imported torch
    (probe_fork.py) instead of a fresh interpreter each: the same child, without its imports."""
    import probe_fork

    from neuronsweep.stages import plan

    probe_fork.real, plan.run_probe = plan.run_probe, probe_fork.run_probe
    yield
    plan.run_probe = probe_fork.real


@pytest.fixture
def real_probe(monkeypatch):
    """The plan's probes as production runs them: `python -m neuronsweep.workloads.<probe>`."""
    import probe_fork

    from neuronsweep.stages import plan

    monkeypatch.setattr(plan, "run_probe", probe_fork.real)
    return monkeypatch


@pytest.fixture(scope="session", autouse=True)
def host_cache_root(tmp_path_factory):
    """Where the session's host measurements go; measured only when a test first asks (private_cache)."""
    HOST_CACHE["root"] = shared_dir(tmp_path_factory) / "host-cache"


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A completed tiny sweep, made once per test run; tests copy it (mtimes and .snakemake metadata
    included) before changing it."""
    return shared_sweep(tmp_path_factory, "finished", tiny_config)


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(finished_run, dest, symlinks=True)
    return dest


@pytest.fixture(scope="session")
def neuron_run(tmp_path_factory) -> Path:
    """The two-case sweep on the neuron stand-in toolchain, made once per test run for the tests that only
    read it (test_neuron_backend, test_neuron_profiler); captures hold the device half a second, so builds
    and captures overlap on the chip's two cores."""
    return shared_sweep(
        tmp_path_factory, "neuron-run", neuron_config, lambda work: standin_env(work, STANDIN_CAPTURE_SECONDS="0.5")
    )


@pytest.fixture(scope="session")
def field_test(tmp_path_factory) -> dict:
    """`neuronsweep doctor --field-test` on the stand-in of a trn2 with SDK 2.33, made once per test run: one
    NKI kernel miscompiled (STANDIN_NKI_WRONG: 10 % off), the all_reduce's NEFF refused by the profiler
    (STANDIN_FAIL_MATCH), so its ranks go through the runtime's inspect mode. test_fieldtest reads its
    table; test_torchneuron reads its all_reduce case, as a sweep of its own would have made it."""
    work = shared_dir(tmp_path_factory) / "field-test"
    with made_once(work) as make:
        if make:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            env = {**os.environ, **torchneuron_env(work, STANDIN_NKI_WRONG="1", STANDIN_FAIL_MATCH="allreduce")}
            env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
            argv = [str(BIN / "neuronsweep"), "doctor", "--field-test", "--out", str(work / "ft")]
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=600)
            (work / "result.json").write_text(
                json.dumps({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr})
            )
    return {**json.loads((work / "result.json").read_text()), "out": work / "ft"}


@functools.cache
def _source(func) -> str:
    """A function's source, read once (collection asks for each fixture's once per test that uses it)."""
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        return ""


def _calls(func, names: tuple[str, ...]) -> bool:
    """Whether a test's (or fixture's) source calls any of these."""
    source = _source(func)
    return any(call in source for call in names)


RUNS_SNAKEMAKE = ("snakemake(", "snakemake_argv(", "shared_sweep(", '"snakemake"')
PROBES_TORCH = ("tiny_config(", "private_cache(", "host_measurements(")


@functools.cache
def _probing(module) -> tuple[str, ...]:
    """PROBES_TORCH and the calls of the test module's own helpers that reach one of them (test_tune's
    `make` does, through private_cache): a helper hides a probe from the check no longer."""
    names, helpers = PROBES_TORCH, [f for f in vars(module).values() if inspect.isfunction(f)]
    while True:
        more = tuple(f"{f.__name__}(" for f in helpers if f"{f.__name__}(" not in names and _calls(f, names))
        if not more:
            return names
        names += more


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (the long end-to-end runs; CI runs them with `pytest --slow -m slow`)",
    )


def pytest_report_header(config):
    if not config.getoption("--slow"):
        return "tests marked slow (the long end-to-end runs) are deselected: `pytest --slow` runs them too"


def pytest_collection_modifyitems(config, items):
    """Every test that runs the real workflow, itself or through a fixture, carries
    `@pytest.mark.workflow` (the inner loop, `pytest -m "not workflow"`, is everything else), and every
    other test that probes the host's torch (tiny_config does) carries `@pytest.mark.torch` (.ci/run's
    Python 3.12/3.13 venvs have no torch and skip both): an unmarked one stops the collection, named.
    Tests marked `slow` are deselected unless `--slow` is given, after those checks (so they cover them too)."""
    unmarked, untorched = [], []
    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        funcs = [f for f in [getattr(item, "function", None)] + [d.func for ds in defs.values() for d in ds] if f]
        if item.get_closest_marker("workflow") is None and any(_calls(f, RUNS_SNAKEMAKE) for f in funcs):
            unmarked.append(item.nodeid)
        elif not any(item.get_closest_marker(m) for m in ("workflow", "torch")) and any(
            _calls(f, _probing(item.module)) for f in funcs
        ):
            untorched.append(item.nodeid)
    if unmarked:
        raise pytest.UsageError(
            f"these tests run the workflow but are not marked @pytest.mark.workflow: {', '.join(unmarked)}"
        )
    if untorched:
        raise pytest.UsageError(
            f"these tests probe the host's torch but are not marked @pytest.mark.torch: {', '.join(untorched)}"
        )
    if not config.getoption("--slow"):
        long = [item for item in items if item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
    items[:] = spread_longest(items, getattr(config, "workerinput", {}).get("workercount", 1))


def spread_longest(items: list, workers: int) -> list:
    """The collection in the order xdist's work stealing should get it: it hands each worker a contiguous
    share of the list at the start (the first third to one of three, ...), and later moves tests from the
    end of the longest queue to an idle worker. So the longest tests are dealt round robin into one share
    per worker, longest first (the Slurm test first: its jobs mostly wait on the scheduler), then the other
    workflow tests; the short ones fill each share to its size in collection order, a module's tests
    together, where stealing evens out the end. Sorted longest first instead, one worker got every long test
    and ran them one after another while the others idled; the short ones dealt round robin too, every
    worker imported and warmed up what every module needs (torch.export, transformers, DuckDB), a third of
    the inner loop's CPU time."""
    rank = {id(i): _longest_first(i.nodeid) for i in items}
    ordered = sorted(items, key=lambda i: (rank[id(i)], i.get_closest_marker("workflow") is None))
    shares = max(1, workers)
    short = [i for i in ordered if rank[id(i)] == len(LONGEST) and i.get_closest_marker("workflow") is None]
    dealt = [ordered[: len(ordered) - len(short)][k::shares] for k in range(shares)]
    out: list = []
    for k in range(shares):  # xdist's share sizes: what is left over the workers left
        size = (len(items) - len(out)) // (shares - k)
        take = max(0, size - len(dealt[k]))
        out += dealt[k] + short[:take]
        short = short[take:]
    return out  # the last share took what was left


# The longest tests (`pytest --durations`, 2 cores, 2026-11-27), longest first; spread_longest deals them
# out. A test missing here only costs the run's tail.
LONGEST = (
    "test_slurm.py::",
    "test_search.py::test_a_real_search_on_cpu",
    "test_neuron_nki.py::test_rounds_in_processes_on_neuron",
    "test_fieldtest.py::test_field_test_prints",
    "test_model_layers.py::test_a_tiny_moe_model",
    "test_crash_recovery.py::",
    "test_bad_configs.py::test_refused_by_snakemake",
    "test_tune.py::test_a_real_tune",
    "test_suites.py::test_every_suite_builds_on_neuron",
    "test_torchneuron.py::test_collectives_on_torchneuron",
    "test_search.py::test_the_compilers_optlevel",
    "test_neuron_collectives.py::test_collectives_suite",
    "test_cpu_backend.py::test_stages_by_hand",
    "test_torchneuron.py::test_smoke_and_llm",
    "test_warmstart.py::test_a_stage_runs_in_a_child",
    "test_search.py::test_an_nki_kernels_tile_size",
    "test_torchneuron.py::test_each_build_compiles",
    "test_slots.py::test_four_captures",
    "test_torchneuron.py::test_a_neff_the_profiler_refuses",
    "test_collectives.py::test_gloo_sweep",
    "test_custom.py::test_a_users_function_is_swept",
    "test_model_layers.py::test_the_torchneuron_standin_builds",
    "test_custom.py::test_a_users_nki_kernel",
    "test_workflow_semantics.py::test_failed_capture_keeps",
    "test_suites.py::test_every_suite_end_to_end_on_cpu",
    "test_slots.py::test_two_snakemake_processes",
    "test_hostile_profiles.py::test_damaged_profiles_are_read_or_refused_in_one_sentence[legacy]",
    "test_models.py::test_a_routing_policy_the_model_cannot_have",
)


def _longest_first(nodeid: str) -> int:
    return next((rank for rank, name in enumerate(LONGEST) if name in nodeid), len(LONGEST))
