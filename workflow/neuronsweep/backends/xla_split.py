"""A layer case's time by category on the xla backend, from XLA's own per-op spans.

Under torch-xla's profiler (torch_xla.debug.profiler start_trace/stop_trace), XLA's CPU runtime records a
span for every thunk it runs, named by the optimized HLO instruction it runs (`dot.5`, `add_rsqrt_fusion`,
a parallel fusion as `<name>.clone` inside a `call.N`), on the threads that ran it, and a
PjRtCpuExecutable::ExecuteHelper span where each execution was dispatched; the profiler writes them as a
Chrome trace (plugins/profile/<run>/<host>.trace.json.gz). The HLO module, dumped with XLA_HLO_DEBUG=1,
gives each instruction the aten op it came from (`op_type`) and the Python line that called it
(`source_file`, `source_line`): the function or class around that line names the module the op ran in
(`Linear.forward`, `rms_norm`, `eager_attention_forward`, `apply_rotary_pos_emb`).
analysis/layer_categories.py's rules then give the category; a fusion counts in the category of the op its
root came from.

An op's span covers only what its thunk did before returning: a dot or a parallel loop hands its work to
XLA's thread pool and returns, and the runtime records `end: <op>` when that work completes
(ThunkExecutor::TracedExecute, xla/backends/cpu/runtime/thunk_executor.cc). A large dot's work ran
mostly after its span (Llama 3.2 1B's prefill layer: 70 % of the execution was covered by no span).
So per execution, from its first op's start to its last op's completion: an instant inside ops' spans
is shared equally among their categories (analysis/intervals.shares); an instant inside no span but
before some ops' completions is shared equally among those ops' categories (their work, or work
queued behind theirs: the trace does not tell which op's the pool ran); `other` is the rest, so the
categories add up to the span. The record (store/layer_split.py) is the split of the execution whose
span is the median.
The module path of an op is not in the metadata, so no GEMM's time inside the layer is read (the
isolation gap is the cpu backend's).
"""

from __future__ import annotations

import ast
import bisect
import functools
from pathlib import Path

from neuronsweep.analysis.intervals import shares
from neuronsweep.analysis.layer_categories import CATEGORIES, categorize
from neuronsweep.formats import chrome_trace, hlo
from neuronsweep.store.layer_split import LayerSplitRecord

EXECUTIONS = 5  # profiled executions, after the capture's warm-up and timing
DISPATCH = "PjRtCpuExecutable::ExecuteHelper"
TRACE_GLOB = "plugins/profile/*/*.trace.json.gz"
NO_THUNK = {"bitcast", "tuple", "get-tuple-element", "parameter", "constant"}  # instructions with no span
COMPLETION = "end: "  # the runtime's event when a thunk's work completed, after the name
METHOD = (
    f"XLA's per-thunk spans under torch-xla's profiler, each HLO instruction's category from its op_type and the "
    f"function around its source line; overlapping categories share the time; outside every span, the ops not yet "
    f"completed (their `end:` event) share it; other = the rest: the median of {EXECUTIONS} executions"
)
NO_GEMM_MODULES = "the HLO metadata names an op's source line, not the module path a GEMM timed alone is matched by"


@functools.cache
def _definitions(path: str) -> list[tuple[int, int, str, str]]:
    """(first line, last line, qualified name, innermost class or function name) of every def and class."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    out = []

    def walk(node: ast.AST, prefix: str, cls: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                inner = child.name if isinstance(child, ast.ClassDef) else cls or child.name
                out.append((child.lineno, child.end_lineno or child.lineno, name, inner))
                walk(child, f"{name}.", inner if isinstance(child, ast.ClassDef) else cls)

    walk(tree, "", "")
    return out


def enclosing(source_location: str | None) -> tuple[str, str]:
    """(qualified name of the innermost def around a `file:line`, its class or else its function name)."""
    if not source_location or ":" not in source_location:
        return "", ""
    path, _, line = source_location.rpartition(":")
    if not line.isdigit():
        return "", ""
    around = [d for d in _definitions(path) if d[0] <= int(line) <= d[1]]
    if not around:
        return "", ""
    return max(around, key=lambda d: d[0])[2:]


def categories_of(rows: list[dict]) -> dict[str, str]:
    """The entry computation's instructions -> their category. A `call` XLA wrapped around a fusion counts
    in its root op's; another instruction XLA added itself has no metadata (a layout copy before a dot, a
    reduce split in two): it counts in the category of the first op it feeds that has one, else `other`."""
    entry = [r for r in rows if r["computation_kind"] == "entry"]
    roots = {r["computation"]: r for r in rows if r["is_root"] and r["op_type"]}

    def category(r: dict) -> str:
        qualname, owner = enclosing(r["source_location"])
        return categorize(r["op_type"].rpartition("__")[2], "", owner, qualname)

    out = {}
    for r in entry:
        if r["op_type"]:
            out[r["hlo_name"]] = category(r)
        elif r["calls"] in roots:  # a `call` XLA wrapped around a parallel fusion: the fusion's root op
            out[r["hlo_name"]] = category(roots[r["calls"]])
    users = users_of(rows)
    for _ in range(len(entry)):  # a chain of added instructions (copy -> copy -> dot) takes a pass a link
        added = {
            r["hlo_name"]: next((out[u] for u in users.get(r["hlo_name"], []) if u in out), None)
            for r in entry
            if r["hlo_name"] not in out
        }
        found = {name: category for name, category in added.items() if category}
        if not found:
            break
        out |= found
    return {r["hlo_name"]: out.get(r["hlo_name"], "other") for r in entry}


def users_of(rows: list[dict]) -> dict[str, list[str]]:
    """The entry computation's instructions -> the instructions that take their output, through those XLA
    runs no thunk for (a bitcast, a tuple: no span) to the ones that have one."""
    entry = [r for r in rows if r["computation_kind"] == "entry"]
    direct: dict[str, list[str]] = {}
    for r in entry:
        for operand in filter(None, (r["operands"] or "").split(",")):
            direct.setdefault(operand, []).append(r["hlo_name"])
    views = {r["hlo_name"] for r in entry if r["opcode"] in NO_THUNK}

    def through(name: str, seen: frozenset = frozenset()) -> list[str]:
        out = []
        for user in direct.get(name, []):
            if user in views and user not in seen:
                out += through(user, seen | {user})
            elif user not in views:
                out.append(user)
        return out

    return {name: through(name) for name in direct}


def trace_events(folder: Path) -> list[tuple[str, int, int]]:
    """The complete ('X') events of the profiler's Chrome trace in `folder` as (name, ts, dur) in ns, by start,
    read exactly by formats/chrome_trace.py."""
    found = sorted(folder.glob(TRACE_GLOB))
    if not found:
        raise FileNotFoundError(f"torch-xla's profiler wrote no {TRACE_GLOB} under {folder}")
    with chrome_trace.read(found[-1]) as events:
        return events.complete_slices()


def executions(
    events: list[tuple[str, int, int]], names: dict[str, str], users: dict[str, list[str]] | None = None
) -> list[tuple[int, int, list[tuple[int, int, int, str]]]]:
    """(start, end, [(start, span end, completion, category)]) per execution, in ns: the module's instructions
    from one PjRtCpuExecutable::ExecuteHelper (the dispatch of an execution) to the next, and the first of
    them to the last one's completion (XLA runs them on its own threads, after the dispatch returned).

    An op's completion is its `end: <name>` event, capped by the first start of an op that takes its output
    (`users`): the event can be written after the ops its completion made ready have run (in the traces, a
    dot's user starts before the dot's `end:`); without an event, its span's end."""
    dispatches = [ts for name, ts, _ in events if name == DISPATCH]
    completions: dict[str, list[int]] = {}
    for name, ts, _ in events:  # by start already
        if name.startswith(COMPLETION):
            completions.setdefault(name[len(COMPLETION) :], []).append(ts)
    ops: list[list[tuple[str, int, int, str]]] = [[] for _ in dispatches]
    for name, ts, dur in events:
        op = name.removesuffix(".clone")
        at = bisect.bisect_right(dispatches, ts) - 1
        if op in names and at >= 0:
            ops[at].append((name, ts, ts + dur, names[op]))
    out = []
    for spans in filter(None, ops):
        starts: dict[str, list[int]] = {}
        for name, start, _, _ in spans:
            starts.setdefault(name, []).append(start)
        timed = []
        for name, start, end, category in spans:
            later = completions.get(name, [])
            i = bisect.bisect_left(later, start)
            done = later[i] if i < len(later) else end
            for user in (users or {}).get(name, []):
                done = min([done, *(t for t in starts.get(user, []) if t >= start)])
            timed.append((start, end, max(end, done), category))
        out.append((min(t[0] for t in timed), max(t[2] for t in timed), timed))
    return out


def attribute(spans: list[tuple[int, int, int, str]]) -> tuple[dict[str, float], int]:
    """Per category the ns it is given: the instants inside spans shared among their categories, the others
    before some completions among those ops' categories; and the ns either covers."""
    given, covered = shares([(s, e, c) for s, e, _, c in spans])
    steps = sorted(
        [(s, 1, 1, c) for s, _, _, c in spans]
        + [(e, -1, 0, "") for _, e, _, _ in spans]
        + [(d, 0, -1, c) for _, _, d, c in spans]
    )
    pending: dict[str, int] = {}
    running, last = 0, None
    for t, run, pend, category in steps:
        waiting = [c for c, n in pending.items() if n > 0]
        if last is not None and t > last and not running and waiting:  # inside no span, ops not completed
            for c in waiting:
                given[c] = given.get(c, 0.0) + (t - last) / len(waiting)
            covered += t - last
        running += run
        if category:
            pending[category] = pending.get(category, 0) + pend
        last = t
    return given, covered


def measure(profile_dir: Path, module: str | Path) -> LayerSplitRecord:
    """The layer's split from the profiler's trace in profile_dir and the HLO module the process ran."""
    rows = hlo.read(module)
    per_exec = []
    for start, end, spans in executions(trace_events(profile_dir), categories_of(rows), users_of(rows)):
        ns, _ = attribute(spans)
        per_exec.append(((end - start) * 1e-9, {c: ns.get(c, 0.0) * 1e-9 for c in CATEGORIES}))
    if not per_exec:
        raise ValueError(f"the profiler's trace under {profile_dir} has no execution of the module's instructions")
    return LayerSplitRecord.median_of(per_exec, METHOD, gemms_inside_why=NO_GEMM_MODULES)
