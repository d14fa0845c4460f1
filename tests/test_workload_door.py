"""The workload door (docs/architecture.md, "Adding a workload kind"): what a workload kind can do is asked of
its descriptor (workloads/descriptor.py, declared by its module), never by comparing its name outside
workloads/ (issue 79: 31 such comparisons when it was filed; at most 5 asked)."""

import ast
import re
from pathlib import Path

from helpers import names_one_of

from neuronsweep.workloads import KINDS, WORKLOADS, described
from neuronsweep.workloads.descriptor import Workload

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workflow" / "neuronsweep"


def _reads_kind(node: ast.AST) -> bool:
    """`spec["kind"]`, `spec.get("kind")`, `record.kind` or a variable named `kind`."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind"
    )


def _names_a_kind(node: ast.AST) -> bool:
    return names_one_of(node, KINDS)


def kind_comparisons(package: Path = PACKAGE, rules: Path = ROOT / "workflow" / "rules") -> list[str]:
    """file:line of every comparison of a workload's kind with a kind's name outside workloads/, and in the
    workflow's rules."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "workloads":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = (node.left, *node.comparators)
                if any(_reads_kind(n) for n in sides) and any(_names_a_kind(n) for n in sides):
                    found.append(f"{relative}:{node.lineno}")
    names = "|".join(KINDS)
    pattern = re.compile(rf"""kind["']\)?\]?\s*(==|!=|\bin)\s*\(?\s*["']({names})["']""")
    for path in sorted(rules.glob("*.smk")):
        found += [f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    return found


def test_no_kind_name_is_compared_outside_workloads():
    assert kind_comparisons() == []


def test_the_check_finds_each_form_of_comparison(tmp_path):
    """The gate above can fail: each way of comparing a kind's name is found."""
    package = tmp_path / "neuronsweep"
    (package / "stages").mkdir(parents=True)
    (package / "workloads").mkdir()
    (package / "stages" / "a.py").write_text(
        'if spec["kind"] == "layer": pass\n'
        'if spec.get("kind") != "collective": pass\n'
        'if record.kind in ("custom", "layer"): pass\n'
        'if r["part"] == "layer": pass\n'  # not a kind: a model part
    )
    (package / "workloads" / "b.py").write_text('if spec["kind"] == "layer": pass\n')  # inside: allowed
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "x.smk").write_text('    if spec.get("kind") != "custom":\n')
    assert kind_comparisons(package, rules) == ["stages/a.py:1", "stages/a.py:2", "stages/a.py:3", "x.smk:1"]


def test_every_kind_declares_what_it_can_do_under_its_own_name():
    assert {name: module.DESCRIPTOR.name for name, module in KINDS.items()} == {name: name for name in KINDS}
    assert WORKLOADS["collective"].ranks and WORKLOADS["layer"].layer_split and WORKLOADS["custom"].user_code
    assert [n for n, w in WORKLOADS.items() if w.real_inputs] == ["custom", "layer", "forward"]
    # run on ranks: a collective alone (its bandwidth) and a forward across ranks (computing between them)
    assert [(n, w.bandwidth) for n, w in WORKLOADS.items() if w.ranks] == [("collective", True), ("forward", False)]
    # a record of a kind no module declares (an old plan.json, a damaged one) can do nothing special
    assert described({"kind": "gone"}) == Workload("gone") and described(None) == Workload("None")


def test_no_code_outside_workloads_reaches_into_a_kinds_module_for_what_the_package_answers():
    """What a kind's module says of a workload (its shapes, program, FLOPs, reference, ...) is asked of the
    package (workloads.tensor_shapes(spec), ...), which also says what a kind that declares nothing of it
    does: no `kind_of` outside workloads/, and no probing a kind's module with hasattr."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "workloads":
            continue
        text = path.read_text()
        found += [f"{relative}: {m}" for m in re.findall(r"\bkind_of\(|hasattr\(kind\b|getattr\(kind\b", text)]
    assert found == []
