"""The backend door (docs/architecture.md, "Adding a backend"): what a backend can do is asked of its
descriptor (config/backends.py), never by comparing its name outside backends/ and config/."""

import ast
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
from helpers import names_one_of

from neuronsweep import backends
from neuronsweep.config import schema
from neuronsweep.config.backends import BACKENDS, NAMES, Backend
from neuronsweep.config.run_config import RunConfig
from neuronsweep.host import slots
from neuronsweep.stages import plan as plan_stage
from neuronsweep.stages import plan_fits
from neuronsweep.workloads import unsupported

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workflow" / "neuronsweep"
# where a backend's name may still be compared outside backends/ and config/, each with why (at most 8)
ALLOWED: dict[str, str] = {}


def _named(node: ast.AST) -> bool:
    """A backend's name as a literal, alone or inside a tuple, list or set."""
    return names_one_of(node, NAMES)


def name_comparisons(package: Path = PACKAGE, rules: tuple[Path, ...] = (ROOT / "workflow" / "rules",)) -> list[str]:
    """file:line of every comparison with a backend's name in the package outside backends/ and config/,
    and in the workflow's rules."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] in ("backends", "config"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(_named(n) for n in (node.left, *node.comparators)):
                found.append(f"{relative}:{node.lineno}")
            elif (  # a pandas Series' .isin(("cpu", ...)) or a dict's .get("neuron")
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("isin", "get")
                and any(_named(a) for a in node.args)
            ):
                found.append(f"{relative}:{node.lineno}")
    pattern = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](cpu|neuron|xla)["']|["'](cpu|neuron|xla)["']\s*(==|!=)""")
    for path in sorted(p for folder in rules for p in folder.glob("*.smk")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.name}:{number}")
    return found


def test_no_backend_name_is_compared_outside_backends_and_config():
    assert len(ALLOWED) <= 8
    leaks = [where for where in name_comparisons() if where.split(":")[0] not in ALLOWED]
    assert not leaks, f"ask the Backend descriptor (config/backends.py) instead of the name: {leaks}"


def test_the_scan_finds_a_comparison_of_a_name(tmp_path):
    """The check above can fail: a module or a rule that compares a name is found, backends/ is not."""
    for folder in ("stages", "backends", "rules"):
        (tmp_path / folder).mkdir()
    (tmp_path / "stages" / "leak.py").write_text(
        'def f(row):\n    return row["backend"] == "neuron" or row.get("xla")\n'
    )
    (tmp_path / "backends" / "own.py").write_text('def f(name):\n    return name in ("cpu", "xla")\n')
    (tmp_path / "rules" / "r.smk").write_text('X = 1\nON = BACKEND == "neuron"\n')
    assert name_comparisons(tmp_path, (tmp_path / "rules",)) == ["stages/leak.py:2", "stages/leak.py:2", "r.smk:2"]


def test_every_backend_has_a_module_with_the_three_stages_and_a_descriptor():
    assert set(BACKENDS) == set(NAMES)
    for name, described in BACKENDS.items():
        assert described.name == name
        assert set(described.artifacts) == {"build", "capture"}
        source = (PACKAGE / "backends" / f"{name}.py").read_text()
        assert {f.name for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)} >= {
            "build",
            "capture",
            "view",
        }


def test_a_new_backend_is_one_descriptor_entry_for_the_rest_of_the_package(monkeypatch):
    """A backend the package has never heard of, described once: the plan, the slots, the memory check,
    what it cannot run and the report's words come from its descriptor alone."""
    toy = replace(
        BACKENDS["cpu"],
        name="toy",
        retimed_here=False,
        probes_host=False,
        varies_unsupported=None,
        collectives_unsupported="toy ranks cannot talk",
        profiled_time_note=None,
        preload=(),
    )
    monkeypatch.setitem(BACKENDS, "toy", toy)
    config = schema.validate({"suites": {"matmul": {"grid": {"m": [64], "k": [64], "n": [64]}}}}, source="test")
    built = plan_stage.make_plan(RunConfig.of(config), "toy")
    assert list(built.workloads) == ["matmul-m64-k64-n64-fp32"]
    plan_fits.check_memory(built, RunConfig.of(config))
    assert slots.pool("toy").describe()
    budget = backends.memory_budget("toy", RunConfig.of(config), 2**30)
    assert budget is not None and budget.what == "this machine's RAM" and not budget.gathers_experts
    spec = {"kind": "collective", "op": "all_reduce", "world": 2, "bytes": 4, "dtype": "fp32"}
    assert unsupported(spec, "toy") == "toy ranks cannot talk"
    assert unsupported({"kind": "matmul", "dtype": "fp32", "varies": True}, "toy") is None
    assert toy.platform({}) == "this host (toy backend)"
    assert "toy backend" in toy.host_only()


@pytest.mark.parametrize("name", NAMES)
def test_each_descriptor_answers_every_question_once(name):
    """Every field has its backend's answer (no field left to a name switch elsewhere)."""
    described = BACKENDS[name]
    assert isinstance(described, Backend)
    answered = {f.name: getattr(described, f.name) for f in fields(Backend)}
    assert answered["neuron_device"] == (described.device_counters_missing is None)
    assert answered["retimed_here"] <= (not answered["neuron_device"])  # a device's programs run on it
