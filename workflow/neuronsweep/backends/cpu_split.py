"""A layer case's time by category, measured on the cpu backend (workloads/layer.py, analysis/layer_categories.py).

The exported program's nodes keep the module that ran them (`nn_module_stack`) and the line that called
them (`stack_trace`). A copy of the program's graph gets a profiler range around each run of nodes of one
category, and around each GEMM alone (named by its module, relative to the layer); that copy runs a few
times under torch.profiler, each execution in a range of its own. Per execution: a category's time is the
sum of its ranges, `other` the execution's span less all of them (never dropped: the ranges' own cost and
Python's between ops land there), so the categories add up to the span exactly. The record
(store/layer_split.py) is the split of the execution whose span is the median, and each GEMM's median over
the executions. The timed loop never runs this copy: the ranges cost a few microseconds each.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from neuronsweep.analysis.layer_categories import CATEGORIES, categorize, is_gemm_op
from neuronsweep.store.layer_split import LayerSplitRecord

if TYPE_CHECKING:
    from torch import fx

EXECUTIONS = 5  # profiled executions of the instrumented copy, after one untimed
EXEC = "split-exec"


def _where(node: fx.Node) -> tuple[str, str, str]:
    """(module path relative to the layer, module class, the calling source line) of a graph node."""
    stack = node.meta.get("nn_module_stack") or {}
    path, cls = list(stack.values())[-1] if stack else ("", "")
    cls = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    marker = ".layers.0."
    relative = path.split(marker, 1)[1] if marker in path else path.removeprefix("model.").removeprefix("L__self__")
    lines = (node.meta.get("stack_trace") or "").strip().splitlines()
    return relative, cls.rpartition(".")[2], lines[-1].strip() if lines else ""


def _op(node: fx.Node) -> str:
    target = node.target
    name = getattr(target, "__name__", str(target)).split(".")[0]
    namespace = str(getattr(target, "namespace", ""))
    return f"{namespace}::{name}" if namespace and namespace != "aten" else name


def labels(graph: fx.Graph) -> list[tuple[fx.Node, str]]:
    """(node, range name) for every op node: "<category>" or, for a GEMM, "<category>|<module>"."""
    out = []
    for node in graph.nodes:
        if node.op != "call_function" or getattr(node.target, "__name__", "") == "getitem":
            continue
        op = _op(node)
        module, cls, source = _where(node)
        category = categorize(op, module, cls, source)
        out.append((node, f"{category}|{module or '(layer)'}" if is_gemm_op(op) else category))
    return out


def instrument(module: fx.GraphModule) -> fx.GraphModule:
    """A copy of the exported module's graph with a profiler range around each run of same-named nodes,
    over the module's own weights (shared, not copied: a layer's weights can be gigabytes)."""
    import copy

    import torch

    graph = copy.deepcopy(module.graph)
    enter = torch.ops.profiler._record_function_enter_new.default
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    runs: list[list] = []
    for node, name in labels(graph):
        if runs and runs[-1][0] == name and runs[-1][2].next is node:
            runs[-1][2] = node
        else:
            runs.append([name, node, node])
    for name, first, last in runs:
        with graph.inserting_before(first):
            handle = graph.call_function(enter, (name, None))
        with graph.inserting_after(last):
            graph.call_function(leave, (handle,))
    graph.lint()
    return torch.fx.GraphModule(module, graph)


def measure(module: fx.GraphModule, args: list) -> LayerSplitRecord:
    """The layer's split: per category the median seconds over EXECUTIONS profiled executions of the
    instrumented copy, each GEMM module's median seconds inside the layer, and the executions' median span."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    gm = instrument(module)
    with torch.inference_mode():
        gm(*args)  # untimed: the first run of a new graph module pays its own set-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(EXECUTIONS):
                with record_function(f"{EXEC}{i}"):
                    gm(*args)
    events = [e for e in prof.events() if e.name.startswith(EXEC) or "|" in e.name or e.name in CATEGORIES]
    spans = sorted((e for e in events if e.name.startswith(EXEC)), key=lambda e: e.time_range.start)
    per_exec = []
    for span in spans:
        start, end = span.time_range.start, span.time_range.end
        inside: dict[str, float] = {}
        for e in events:
            if (
                e is not span
                and start <= e.time_range.start
                and e.time_range.end <= end
                and not e.name.startswith(EXEC)
            ):
                inside[e.name] = inside.get(e.name, 0.0) + (e.time_range.end - e.time_range.start) * 1e-6
        per_exec.append(((end - start) * 1e-6, inside))
    splits = []
    gemms: dict[str, list[float]] = {}
    for total, inside in per_exec:
        sums = dict.fromkeys(CATEGORIES, 0.0)
        modules: dict[str, float] = {}
        for name, seconds in inside.items():
            category, _, gemm_module = name.partition("|")
            sums[category] += seconds
            if gemm_module:
                modules[gemm_module] = modules.get(gemm_module, 0.0) + seconds
        splits.append((total, sums))
        for m, seconds in modules.items():
            gemms.setdefault(m, []).append(seconds)
    return LayerSplitRecord.median_of(
        splits,
        f"torch.profiler ranges around the exported program's ops by category: the median of {EXECUTIONS} "
        "executions (each GEMM: its median); other = the span less every range",
        gemms_inside_s={m: statistics.median(v) for m, v in sorted(gemms.items())},
    )
