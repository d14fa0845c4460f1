"""Expand the config's suites into scenarios (rows the user asked for) and unique workloads.

Two scenarios that reduce to the same workload share one build and one capture; the plan keeps
both rows and points them at the same workload id.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from neuronsweep import kernels
from neuronsweep.analysis import deployments
from neuronsweep.backends import RANK_PROCESS_BYTES
from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.suites import (
    CollectivesSuite,
    CustomEntry,
    LlmModel,
    LlmSuite,
    LoopsSuite,
    MatmulSuite,
    MlpSuite,
    ModelEntry,
    RecompileSuite,
    Shape,
    TilingSuite,
)
from neuronsweep.environment import WARM_START
from neuronsweep.errors import UserError
from neuronsweep.host import caps, targets
from neuronsweep.store.plan_document import PlanDocument
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import (
    collective,
    collective_of,
    custom,
    deployment,
    described,
    dtype_of,
    expressions,
    forward,
    forward_of,
    has_roofline,
    layer,
    loops,
    matmul,
    mlp,
    part_of,
    ranks_of,
    routing,
    sharding,
    unsupported,
    user_code,
    uses_nki,
    workload_id,
)
from neuronsweep.workloads import flops as work_flops
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.probed import LayerCount, ProbedGemm, ProbedPass
from neuronsweep.workloads.routing import Policy


@dataclass(frozen=True)
class Scenario:
    """One row of the sweep: a suite's point, its labels, and the workload it runs (scenarios of two suites may share
    one workload)."""

    id: str
    suite: str
    workload_id: str
    labels: dict = field(default_factory=dict, hash=False, compare=False)
    kind: str = ""  # the config's suite key (matmul, custom, model, ...): what a suite is, beside its name


@dataclass
class Plan:
    """The run's plan (plan.json): its scenarios, the workloads to build and capture, and those this backend cannot run
    with the reason."""

    run: str
    backend: str
    scenarios: list[Scenario]
    workloads: dict[str, Spec]  # workload id -> spec, sorted by id: what gets built and captured
    unsupported: dict[str, str]  # workload id -> why this backend cannot run it (no jobs, a CSV row)

    def to_dict(self) -> PlanDocument:
        """plan.json's content (what run_setup adds beside it: the setup and the config)."""
        return {
            "run": self.run,
            "backend": self.backend,
            "counts": {
                "scenarios": len(self.scenarios),
                "workloads": len(self.workloads),
                "unsupported": len(self.unsupported),
            },
            "scenarios": [asdict(s) for s in self.scenarios],
            "workloads": self.workloads,
            "unsupported": self.unsupported,
        }


def natural(text: str) -> tuple:
    """A sort key that orders the numbers in an id as numbers: b1, b2, b16, b128 (not b1, b128, b16)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _matmul_scenarios(suite: MatmulSuite) -> list[tuple[Scenario, Spec]]:
    shapes: list[Shape] = []
    if "grid" in suite:
        g = suite["grid"]
        shapes += [Shape(m=m, k=k, n=n) for m, k, n in itertools.product(g["m"], g["k"], g["n"])]
    shapes += [Shape(**s) for s in suite.get("shapes", [])]
    out: list[tuple[Scenario, Spec]] = []
    for shape, dtype, impl in itertools.product(shapes, suite["dtype"], suite["impl"]):
        spec = matmul.spec(shape["m"], shape["k"], shape["n"], dtype, impl, nki_tile=suite.get("nki_tile"))
        wid = workload_id(spec)
        labels = {**shape, "dtype": dtype, "impl": impl}
        out.append((Scenario(id=wid, suite="matmul", workload_id=wid, labels=labels), spec))
    return out


def _tiling_scenarios(suite: TilingSuite) -> list[tuple[Scenario, Spec]]:
    """Each dim in `vary` set to boundary*multiple+offset, the others at `base` (a tiling sweep)."""
    out: list[tuple[Scenario, Spec]] = []
    for dim, boundary, multiple, offset, dtype in itertools.product(
        suite["vary"], suite["boundaries"], suite["multiples"], suite["offsets"], suite["dtype"]
    ):
        value = boundary * multiple + offset
        if value < 1:
            continue
        shape: dict[str, int] = {**suite["base"], dim: value}
        spec = matmul.spec(shape["m"], shape["k"], shape["n"], dtype)
        labels = {
            **shape,
            "dtype": dtype,
            "dim": dim,
            "value": value,
            "boundary": boundary,
            "multiple": multiple,
            "offset": offset,
        }
        out.append(
            (
                Scenario(
                    id=f"tiling-{dim}{value}-{dtype}", suite="tiling", workload_id=workload_id(spec), labels=labels
                ),
                spec,
            )
        )
    return out


def llm_gemm(model: LlmModel, projection: str) -> tuple[int, int]:
    """(K, N) of one projection: the GEMM is [M, K] @ [K, N]."""
    h, i = model["hidden"], model["intermediate"]
    if projection in ("ffn_up", "ffn_gate"):
        return h, i
    if projection == "ffn_down":
        return i, h
    if projection == "o":
        return h, h
    if "heads" not in model or "kv_heads" not in model:
        raise UserError(
            f"config key 'suites.llm.models' ({model['name']}): projection qkv needs 'heads' and "
            "'kv_heads'; add them or drop qkv from projections."
        )
    if h % model["heads"] or model["kv_heads"] > model["heads"]:
        raise UserError(
            f"config key 'suites.llm.models' ({model['name']}): hidden {h} must be a multiple of heads "
            f"{model['heads']} (the head size) and kv_heads {model['kv_heads']} at most heads; fix them."
        )
    return h, h + 2 * model["kv_heads"] * (h // model["heads"])


def _llm_scenarios(suite: LlmSuite) -> list[tuple[Scenario, Spec]]:
    """Prefill M = batch*seq for every bucket; decode M = batch (one new token per sequence)."""
    out: list[tuple[Scenario, Spec]] = []
    for model, phase, proj, dtype in itertools.product(
        suite["models"], suite["phases"], suite["projections"], suite["dtype"]
    ):
        k, n = llm_gemm(model, proj)
        buckets = (
            [(b, s) for b in suite["batch"] for s in suite["seq"]]
            if phase == "prefill"
            else [(b, None) for b in suite["batch"]]
        )
        for b, s in buckets:
            m = b * s if s is not None else b  # a prefill's bucket has a seq, a decode's none
            spec = matmul.spec(m=m, k=k, n=n, dtype=dtype)
            bucket = f"b{b}-s{s}" if s else f"b{b}"
            labels = {
                "model": model["name"],
                "phase": phase,
                "batch": b,
                "seq": s,
                "projection": proj,
                "m": m,
                "k": k,
                "n": n,
                "dtype": dtype,
            }
            out.append(
                (
                    Scenario(
                        id=f"llm-{model['name']}-{phase}-{bucket}-{proj}-{dtype}",
                        suite="llm",
                        workload_id=workload_id(spec),
                        labels=labels,
                    ),
                    spec,
                )
            )
    return out


def _mlp_scenarios(suite: MlpSuite) -> list[tuple[Scenario, Spec]]:
    out: list[tuple[Scenario, Spec]] = []
    for cfg, dtype, impl in itertools.product(suite["configs"], suite["dtype"], suite["impl"]):
        spec = mlp.spec(dtype=dtype, impl=impl, **cfg)
        wid = workload_id(spec)
        out.append((Scenario(id=wid, suite="mlp", workload_id=wid, labels={**cfg, "dtype": dtype, "impl": impl}), spec))
    return out


def _loops_scenarios(suite: LoopsSuite) -> list[tuple[Scenario, Spec]]:
    out: list[tuple[Scenario, Spec]] = []
    for (size, factor), pattern, dtype in itertools.product(suite["sizes"].items(), suite["patterns"], suite["dtype"]):
        steps = suite["steps"] * factor
        spec = loops.spec(pattern, steps, suite["batch"], suite["features"], dtype)
        labels = {
            "size": size,
            "pattern": pattern,
            "steps": steps,
            "batch": suite["batch"],
            "features": suite["features"],
            "dtype": dtype,
        }
        out.append(
            (
                Scenario(
                    id=f"loops-{size}-{pattern}-{dtype}", suite="loops", workload_id=workload_id(spec), labels=labels
                ),
                spec,
            )
        )
    return out


def _recompile_scenarios(suite: RecompileSuite) -> list[tuple[Scenario, Spec]]:
    """Seed 002's trap for real: matmuls whose graph does (python_int) or does not (static,
    python_float) change between calls; lazy-tensor backends count the compiles."""
    out: list[tuple[Scenario, Spec]] = []
    for shape, varies, dtype in itertools.product(suite["shapes"], suite["varies"], suite["dtype"]):
        spec = matmul.spec(dtype=dtype, varies=varies, **shape)
        labels = {**shape, "dtype": dtype, "varies": varies}
        sid = f"recompile-{varies.replace('_', '')}-m{shape['m']}-k{shape['k']}-n{shape['n']}-{dtype}"
        out.append((Scenario(id=sid, suite="recompile", workload_id=workload_id(spec), labels=labels), spec))
    return out


def collective_sizes(sizes: list[int] | dict[str, int]) -> list[int]:
    """A list of byte sizes, or {from, to}: `from` doubled until past `to` (nccl-tests' -b/-e/-f 2)."""
    if isinstance(sizes, list):
        return sizes
    if sizes["from"] > sizes["to"]:
        raise UserError(
            f"config key 'suites.collectives.sizes': from {sizes['from']} is above to {sizes['to']}; swap them."
        )
    out, size = [], sizes["from"]
    while size <= sizes["to"]:
        out.append(size)
        size *= 2
    return out


def _collectives_scenarios(suite: CollectivesSuite) -> list[tuple[Scenario, Spec]]:
    out: list[tuple[Scenario, Spec]] = []
    for op, world, size, dtype in itertools.product(
        suite["operations"], suite["world_sizes"], collective_sizes(suite["sizes"]), suite["dtype"]
    ):
        spec = collective.spec(op, size, world, dtype)
        wid, nbytes = workload_id(spec), collective_of(spec).nbytes
        labels = {"op": op, "world": world, "size_asked": size, "bytes": nbytes, "dtype": dtype}
        out.append(
            (
                Scenario(
                    id=wid if size == nbytes else f"{wid}-asked{size}b",
                    suite="collectives",
                    workload_id=wid,
                    labels=labels,
                ),
                spec,
            )
        )
    return out


def custom_cases(entry: CustomEntry, where: str) -> list[dict]:
    """Every case of one custom entry: grid point x params x dtype, each input's shape evaluated there.
    A shape or flops name the grid does not have is one sentence naming the entry."""
    grid, params = entry["grid"], entry["params"]
    for arg, shape in entry["inputs"].items():
        for dim in shape:
            try:
                unknown = expressions.names(dim) - set(grid)
            except expressions.ExpressionError as exc:
                raise UserError(f"{where}: inputs.{arg} dimension {exc}; write an integer or an expression.") from None
            if unknown:
                raise UserError(
                    f"{where}: inputs.{arg} uses {', '.join(sorted(unknown))}, which grid does not define "
                    f"(it has {', '.join(grid) or 'no names'}); add it to grid or write the number."
                )
    if "flops" in entry:
        try:
            unknown = expressions.names(entry["flops"]) - set(grid)
        except expressions.ExpressionError as exc:
            raise UserError(f"{where}: flops {exc}; write an integer or an expression over grid names.") from None
        if unknown:
            raise UserError(f"{where}: flops uses {', '.join(sorted(unknown))}, which grid does not define; fix it.")
    cases = []
    for point in itertools.product(*grid.values()):
        dims = dict(zip(grid, point))
        for values in itertools.product(*params.values()):
            try:
                shapes = {
                    a: [int(expressions.evaluate(d, dims)) for d in shape] for a, shape in entry["inputs"].items()
                }
                flops = int(expressions.evaluate(entry["flops"], dims)) if "flops" in entry else None
            except expressions.ExpressionError as exc:
                raise UserError(f"{where}: at {dims}, {exc}; fix the expression.") from None
            if any(d < 1 for shape in shapes.values() for d in shape):
                raise UserError(f"{where}: at {dims}, a shape {shapes} has a dimension below 1; fix the grid.")
            for dtype, impl in itertools.product(entry["dtype"], entry["impl"]):
                cases.append(
                    {"dims": dims, "inputs": shapes, "params": dict(zip(params, values)), "dtype": dtype}
                    | {"impl": impl, "flops": flops}
                )
    return cases


def run_probe(module: str, request: str) -> subprocess.CompletedProcess[str]:
    """`python -m neuronsweep.workloads.<module>` with the request on its stdin: a fresh interpreter per
    probe (the test suite swaps in one that forks it from a process that has imported torch already)."""
    return subprocess.run(
        [sys.executable, "-m", f"neuronsweep.workloads.{module}"],
        input=request,
        capture_output=True,
        text=True,
        timeout=600,
    )


def probe_child(module: str, request: dict, cache_dir: str | None) -> dict:
    """custom_probe.py or model_probe.py in a child (torch, transformers and the user's code stay out of
    the planner), its answer kept beside the compile cache while the request (which holds the hashes of
    the files it reads) is the same."""
    key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    slot = Path(cache_dir).expanduser() / module / f"{key}.json" if cache_dir else None
    if slot is not None and slot.is_file():
        try:
            return json.loads(slot.read_text())
        except ValueError:
            pass
    proc = run_probe(module, json.dumps(request))
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{module}: looking at the users' code failed ({last}); see the error above.") from None
    if slot is not None and "error" not in answer:
        slot.parent.mkdir(parents=True, exist_ok=True)
        slot.write_text(json.dumps(answer))
    return answer


def _custom_scenarios(entries: list[CustomEntry], config: RunConfig) -> list[tuple[Scenario, Spec]]:
    """Each entry's cases as workloads of kind `custom`, what the probe found in their specs (output shapes,
    counted FLOPs), the source files' hash with them (an edit rebuilds that entry's cases only)."""
    request: dict[str, list] = {"entries": []}
    digests, all_cases = [], []
    for i, entry in enumerate(entries):
        where = f"suites.custom[{i}] ({entry['name']})"
        cases = custom_cases(entry, where)  # the config's own mistakes first, then the files it names
        all_cases.append(cases)
        refs = [entry["function"], *([entry["nki_kernel"]] if entry.get("nki_kernel") else [])]
        for ref in refs:
            try:
                target, _ = user_code.split(ref)
            except ValueError as exc:
                raise UserError(f"{where}: {exc}; write path/to/file.py:name or package.module:name.") from None
            if user_code.is_file(target) and not Path(target).is_file():
                raise UserError(f"{where}: no such file {target}; give a path relative to the config file.")
        if "nki" in entry["impl"] and not entry.get("nki_kernel"):
            raise UserError(f"{where}: impl nki needs nki_kernel (FILE.py:NAME of the kernel); add it or drop nki.")
        digests.append(user_code.digest(refs))
        request["entries"].append(
            {
                "where": where,
                "function": entry["function"],
                "nki_kernel": entry.get("nki_kernel"),
                "input_names": list(entry["inputs"]),
                "param_names": list(entry["params"]),
                "cases": [{k: c[k] for k in ("inputs", "params", "dtype")} for c in cases],
                "source_sha256": digests[-1],
            }
        )
    answer = probe_child("custom_probe", request, config.cache_dir)
    if "error" in answer:
        raise UserError(answer["error"])
    out: list[tuple[Scenario, Spec]] = []
    for entry, cases, found, digest in zip(entries, all_cases, answer["entries"], digests):
        for case, got in zip(cases, found):
            if case["flops"] is not None:
                flops, source = case["flops"], f"the config: {entry['flops']}"
            elif got.get("error"):
                flops, source = None, f"not counted: the function raised on fake tensors ({got['error']})"
            elif got.get("not_tensors"):
                flops, source = None, f"not counted: the function {got['not_tensors']}"
            elif got["flops"]:
                flops, source = got["flops"], f"{custom.COUNTED_BY} (torch {answer['torch']})"
            else:
                flops, source = None, f"{custom.COUNTED_BY} counts no FLOPs for this function's ops"
            spec = custom.spec(
                entry["name"],
                entry["function"],
                digest,
                case["dims"],
                case["inputs"],
                case["params"],
                case["dtype"],
                got.get("outputs") or [],
                flops,
                source,
                case["impl"],
                entry.get("nki_kernel"),
            )
            wid = workload_id(spec)
            labels = {"name": entry["name"], **case["dims"], **case["params"], "dtype": case["dtype"]}
            labels["impl"] = case["impl"]
            out.append((Scenario(id=wid, suite=f"custom-{entry['name']}", workload_id=wid, labels=labels), spec))
    return out


@dataclass
class _ModelPass:
    """One probe request of a model entry: the entry (batch and seq from its deployment), its layout, the
    phases that share one rank config and graphs, that config, and what the scenarios carry besides."""

    entry: ModelEntry
    layout: sharding.Sharding
    rank: sharding.RankConfig
    config: dict  # the model's config.json fields (empty for a module entry)
    labels: dict  # the deployment's own: its stack's settings, what it assumed


def _model_requests(entries: list[ModelEntry], config: RunConfig) -> tuple[dict, list[_ModelPass]]:
    """The probe's request (one entry per model, layout and group of phases with one rank config and one
    grid of graphs) and what each request entry is; every deployment checked before any job."""
    request: dict = {
        "entries": [],
        "answers": "layers with members",
    }  # the answer's form: a cached older one is not reused
    passes = []
    family = _family(config)
    ended = targets.TARGETS[family].nxd_inference_ended if family in targets.TARGETS else None
    for i, raw in enumerate(entries):
        where = f"suites.model[{i}] ({raw['name']})"
        if ("hf_config" in raw) == ("module" in raw):
            raise UserError(f"{where}: give exactly one of hf_config (a config.json) and module (FILE.py:NAME).")
        deployed = deployment.entry_layout(raw, where)
        deployment.check(deployed, family, ended, where)
        if "slo" in raw:
            deployments.check(raw, where)
        entry = deployed.entry
        source = entry.get("hf_config") or str(user_code.source_file(entry["module"]))
        try:
            digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        except OSError:
            raise UserError(f"{where}: no such file {source}; give a path relative to the config file.") from None
        if "module" in entry and deployed.stack:
            raise UserError(
                f"{where}: a deployment needs hf_config: a rank's shard is its config.json with the rank's heads."
            )
        fields = json.loads(Path(source).read_text()) if "hf_config" in entry else {}
        policy = entry.get("routing", "balanced")
        if isinstance(policy, dict) and "counts" in policy:  # the shares of a measured load, read here
            policy = {"counts": routing.read_counts(Path(policy["counts"]), where), "file": policy["counts"]}
        labels = dict(entry.pop("vllm_labels", {}))
        named: Mapping[str, Any] = entry  # hf_config or module, read by name
        if deployed.assumed:
            labels["assumed"] = "; ".join(deployed.assumed)
        for layout in deployed.shardings:
            groups: dict[str, tuple[sharding.RankConfig, sharding.Grid, list[str]]] = {}
            for phase in entry["phases"]:
                rank = deployment.rank_config(fields, layout, phase, where)
                for grid in deployed.graphs(layout, phase):
                    _check_rank_fits(fields, rank, entry, grid, family, where)
                    key = json.dumps([rank.fields, grid.batches, grid.seqs], sort_keys=True)
                    groups.setdefault(key, (rank, grid, []))[2].append(phase)
            for rank, grid, phases in groups.values():
                request["entries"].append(
                    {
                        "where": where,
                        **{k: named[k] for k in ("hf_config", "module") if k in named},
                        "sha256": digest,
                        "batch": list(grid.batches),
                        "seq": list(grid.seqs),
                        "phases": phases,
                        "dtype": entry["dtype"][0],  # the trace runs in the case's dtype; shapes do not depend on it
                        "routing": policy,
                        **({"rank_config": rank.fields, "expert_ep": rank.expert_ep} if rank.fields else {}),
                        **({"top_k": rank.top_k} if rank.top_k else {}),
                        **({"expert_tokens": rank.expert_tokens} if rank.expert_tokens > 1 else {}),
                    }
                )
                passes.append(_ModelPass(entry, layout, rank, fields, labels))
    return request, passes


def _family(config: RunConfig) -> str | None:
    """The instance family a deployment must run on: neuron.target where it names one."""
    sections = [config.section(name) for name, described in BACKENDS.items() if described.neuron_device]
    return next((s["target"] for s in sections if s.get("target") in targets.TARGETS), None)


def _check_rank_fits(
    fields: dict, rank: sharding.RankConfig, entry: ModelEntry, grid: sharding.Grid, family: str | None, where: str
) -> None:
    """A rank's weights and KV cache (the phase's largest graph) against its core's HBM, where the target is known."""
    hbm = targets.TARGETS[family].hbm_bytes() if family in targets.TARGETS else None  # a logical core's, default LNC
    if not hbm or not any(k in entry for k in deployment.FORMS) or "slo" in entry:
        return  # no deployment given; or candidates against a target, whose table says which do not fit
    batch, seq = max(grid.batches), max(grid.seqs)
    need = max(sharding.rank_bytes(fields, rank, d, batch, seq) for d in entry["dtype"])
    if need > hbm:
        raise UserError(
            f"{where}: one rank's weights and KV cache at tp {rank.labels['tp']} take {need / 2**30:.1f} GiB, over the "
            f"{hbm / 2**30:.0f} GiB of HBM a {family} logical NeuronCore has (host/targets.py); raise the TP degree."
        )


def _model_scenarios(entries: list[ModelEntry], config: RunConfig) -> list[tuple[Scenario, Spec]]:
    """Every GEMM a model runs per (phase, batch, seq), as a matmul workload (shared with every other suite
    that has its shape), the scenario keeping the module, which of its GEMMs, and how often it runs; under
    a parallel layout one rank's GEMMs, and the collectives each forward issues."""
    request, passes = _model_requests(entries, config)
    answer = probe_child("model_probe", request, config.cache_dir)
    if "error" in answer:
        raise UserError(answer["error"])
    out: list[tuple[Scenario, Spec]] = []
    for mp, request_entry, traced in zip(passes, request["entries"], answer["entries"]):
        entry, layout = mp.entry, mp.layout
        policy = routing.label(entry.get("routing", "balanced"))
        for one, dtype in itertools.product(traced, entry["dtype"]):
            moe = bool(one.get("experts"))
            tag = f"-{layout.label(one['phase'], moe)}" if mp.rank.fields or layout.dp > 1 else ""
            common = {k: one[k] for k in ("phase", "batch", "seq")} | {"dtype": dtype} | mp.rank.labels | mp.labels
            common |= {"layout": tag[1:]} if tag else {}
            prefix = f"model-{entry['name']}-{one['phase']}-b{one['batch']}-s{one['seq']}{tag}"
            out += _gemm_scenarios(entry, one, dtype, policy, common, prefix, mp.rank, layout)
            if mp.rank.fields:
                out += _collective_scenarios(entry, one, dtype, common, prefix, mp.config, layout)
            if entry.get("layers", True):
                ranked: ModelEntry = {
                    **entry,
                    "rank_config": mp.rank.fields,
                    "expert_ep": mp.rank.expert_ep,
                    "layout": tag[1:],
                }
                ranked |= {"top_k": mp.rank.top_k} if mp.rank.top_k else {}
                ranked |= {"expert_tokens": mp.rank.expert_tokens} if mp.rank.expert_tokens > 1 else {}
                out += _layer_scenarios(ranked, request_entry["sha256"], request_entry["routing"], one, dtype, common)
                if mp.rank.fields and layout.tp > 1:
                    out += _forward_scenarios(ranked, request_entry, one, dtype, common, prefix, mp)
    return out


FORWARD_SHARE = 0.25  # of this host's RAM a forward's ranks may hold where it picks its layers (forward_layers auto)


def _forward_layers(entry: ModelEntry, one: ProbedPass, world: int, dtype: str) -> tuple[int, str]:
    """How many of the model's first decoder layers the forward across ranks runs, and how that was decided."""
    members = {i: k for k in one["layers"] for i in k.get("members", [k["index"]])}
    total = len(members)
    asked = entry.get("forward_layers", "auto")
    if asked != "auto":
        return min(int(asked), total), f"forward_layers: {asked} of {total}"
    room = FORWARD_SHARE * psutil.virtual_memory().total / world - RANK_PROCESS_BYTES
    held, n = 0, 0
    for i in range(total):
        held += members[i]["params"] * DTYPE_BYTES[dtype]
        if held > room:
            break
        n += 1
    n = max(n, 1)
    if n == total:
        return n, f"auto: all {total} decoder layers"
    return (
        n,
        f"auto: {n} of {total} decoder layers, as many as {world} ranks hold in a quarter of this host's RAM",
    )


def _forward_scenarios(
    entry: ModelEntry, request_entry: dict, one: ProbedPass, dtype: str, common: dict, prefix: str, mp: _ModelPass
) -> list[tuple[Scenario, Spec]]:
    """The rank's shard of the model's first layers run on all tp ranks at once, each layer's collectives
    where the stack issues them (workloads/forward.py): its measured time beside the sum of its parts."""
    if entry.get("forward_layers", "auto") == 0 or not one.get("layers"):
        return []
    world = mp.layout.tp
    n, how = _forward_layers(entry, one, world, dtype)
    tokens = one["seq"] if one["phase"] == "prefill" else 1
    hidden = sharding.hidden_bytes(mp.config, one["batch"], tokens, dtype)
    kind_sites = {
        k["kind"]: forward.sites(
            forward.layer_collectives(
                mp.config, mp.layout, one["phase"], one["batch"], one["seq"], dtype, k["kind"].startswith("moe")
            ),
            hidden,
            world,
            dtype,
        )
        for k in one["layers"]
    }
    spec = forward.spec(entry, request_entry["sha256"], one, dtype, request_entry["routing"], n, world, kind_sites)
    policy = f"-{routing.label(entry.get('routing', 'balanced'))}" if forward_of(spec).routing else ""
    left_out = sorted({why for x in kind_sites.values() for why in x.left_out})
    labels = {"model": entry["name"], **common, "part": "forward", "layers_run": n, "forward_layers_how": how}
    labels |= {"world": world} | ({"collectives_left_out": "; ".join(left_out)} if left_out else {})
    labels |= {"routing": policy[1:]} if policy else {}
    sid = f"{prefix}-forward-l{n}{policy}-{dtype}"
    return [(Scenario(id=sid, suite=f"model-{entry['name']}", workload_id=workload_id(spec), labels=labels), spec)]


def _gemm_scenarios(
    entry: ModelEntry,
    one: ProbedPass,
    dtype: str,
    policy: str,
    common: dict,
    prefix: str,
    rank: sharding.RankConfig,
    layout: sharding.Sharding,
) -> list[tuple[Scenario, Spec]]:
    """The pass's GEMMs, each a matmul workload. Under EP the router still scores every expert: its GEMM
    (hidden -> the rank's experts, as the rank's config builds it) is counted over all of them. Where the
    stack runs a GEMM inside a fused kernel on the device, its label says which."""
    out: list[tuple[Scenario, Spec]] = []
    for g in one["gemms"]:
        n = g["n"]
        moe = one.get("experts", {}).get(g["module"])  # an expert GEMM: its tokens are the policy's
        router = _is_router(g, rank)
        if rank.expert_ep > 1 and router:
            n = g["n"] * rank.expert_ep
        spec = matmul.spec(m=g["m"], k=g["k"], n=n, dtype=dtype)
        short = g["module"].replace("model.layers.*.", "").replace("*", "n")
        gemm = f"{short}.{g['gemm']}" if g["gemm"] not in ("linear1",) else short
        if moe:
            gemm = f"{gemm}-{policy}"
        labels = {"model": entry["name"], **common, "module": g["module"], "gemm": gemm, "count": g["count"]}
        labels |= {"m": g["m"], "k": g["k"], "n": n}
        kernel = deployment.fused(layout, one["phase"], g["module"], bool(moe) or router)
        if kernel:
            labels["fused_on_device"] = kernel
        if moe:
            labels |= {
                "routing": policy,
                "experts": moe["experts"],
                "top_k": moe["top_k"],
                "expert_load": "/".join(map(str, moe["load"])),  # tokens per expert, busiest first
            }
        sid = f"{prefix}-{gemm}-{dtype}"
        out.append(
            (Scenario(id=sid, suite=f"model-{entry['name']}", workload_id=workload_id(spec), labels=labels), spec)
        )
    return out


def _is_router(g: ProbedGemm, rank: sharding.RankConfig) -> bool:
    """Whether a traced GEMM is an MoE router: a `gate` Linear onto the rank's experts."""
    local = next((rank.fields[k] for k in sharding.EXPERT_COUNT_KEYS if k in rank.fields), None)
    return local is not None and g["module"].endswith("gate") and g["n"] == local


def _collective_scenarios(
    entry: ModelEntry, one: ProbedPass, dtype: str, common: dict, prefix: str, fields: dict, layout: sharding.Sharding
) -> list[tuple[Scenario, Spec]]:
    """The collectives one forward of this pass issues per rank (deployment.collectives), each a workload of
    the collectives suite's kind (shared with it where the op, size, world and dtype agree)."""
    kinds = [LayerCount(layers=k["layers"], moe=k["kind"].startswith("moe")) for k in one.get("layers") or []]
    out: list[tuple[Scenario, Spec]] = []
    for c in deployment.collectives(fields, layout, one["phase"], one["batch"], one["seq"], dtype, kinds):
        spec = collective.spec(c.op, c.nbytes, c.world, dtype)
        nbytes = collective_of(spec).nbytes
        labels = {"model": entry["name"], **common, "part": "collective", "op": c.op, "bytes": nbytes}
        labels |= {"world": c.world, "process_group": c.group, "count": c.count, "where": c.what}
        sid = f"{prefix}-coll-{c.op.replace('_', '')}-{nbytes}b-{dtype}"
        out.append(
            (Scenario(id=sid, suite=f"model-{entry['name']}", workload_id=workload_id(spec), labels=labels), spec)
        )
    return out


def _layer_scenarios(
    entry: ModelEntry, digest: str, policy: Policy, one: ProbedPass, dtype: str, common: dict | None = None
) -> list[tuple[Scenario, Spec]]:
    """The model measured whole at one phase, batch, seq and dtype: each kind of decoder layer and the
    head, a `layer` workload each (workloads/layer.py)."""
    if not one.get("layers"):
        raise UserError(
            f"suites.model ({entry['name']}): the model has no decoder layers neuron-sweep recognizes (a "
            "ModuleList named layers of num_hidden_layers entries) to measure whole; set layers: false for it."
        )
    out: list[tuple[Scenario, Spec]] = []
    for kind in [*one["layers"], None]:
        spec = layer.spec(entry, digest, one, kind, dtype, policy)
        record = part_of(spec)
        part = layer.part_label(record)
        policy_label = f"-{routing.label(entry.get('routing', 'balanced'))}" if record.routing else ""
        labels = {
            "model": entry["name"],
            "phase": one["phase"],
            "batch": one["batch"],
            "seq": one["seq"],
            "dtype": dtype,
            **(common or {}),
            "part": record.part,
            "layer_kind": record.layer_kind,
            "layers": record.layers,
        }
        if policy_label:
            labels["routing"] = policy_label[1:]
        layout = f"-{entry['layout']}" if entry.get("layout") else ""
        sid = f"model-{entry['name']}-{one['phase']}-b{one['batch']}-s{one['seq']}{layout}-{part}{policy_label}-{dtype}"
        out.append(
            (Scenario(id=sid, suite=f"model-{entry['name']}", workload_id=workload_id(spec), labels=labels), spec)
        )
    return out


SUITES: dict[str, Callable[[Any], list[tuple[Scenario, Spec]]]] = {
    "matmul": _matmul_scenarios,
    "tiling": _tiling_scenarios,
    "llm": _llm_scenarios,
    "mlp": _mlp_scenarios,
    "loops": _loops_scenarios,
    "recompile": _recompile_scenarios,
    "collectives": _collectives_scenarios,
}


def make_plan(config: RunConfig, backend: str, slow_dtypes: dict[str, str] | None = None) -> Plan:
    """Plan a validated config (config/run_config.py) for the backend that will run it; on cpu,
    slow_dtypes (caps.slow_dtypes) marks the dtypes this host has no fast GEMM for."""
    scenarios: dict[str, Scenario] = {}
    workloads: dict[str, Spec] = {}
    skipped: dict[str, str] = {}
    for suite_name, suite in config.suites.items():
        needs_config: dict[str, Callable[[Any, RunConfig], list[tuple[Scenario, Spec]]]] = {
            "custom": _custom_scenarios,
            "model": _model_scenarios,
        }
        expanded = needs_config[suite_name](suite, config) if suite_name in needs_config else SUITES[suite_name](suite)
        for sc, spec in expanded:
            scenarios.setdefault(sc.id, replace(sc, kind=suite_name))  # asked twice (grid and shapes): one row
            why = unsupported(spec, backend, slow_dtypes)
            if not why and uses_nki(spec):
                target = config.section(backend).get("target") if BACKENDS[backend].neuron_device else None
                why = kernels.unsupported(spec, target, chip=targets.onchip(target))
            if why:
                skipped[sc.workload_id] = why
            else:
                workloads[sc.workload_id] = spec
    if not scenarios:
        raise UserError(
            "nothing to run: the suites of the config expand to no scenario (every tiling value "
            "boundary * multiple + offset is below 1?); widen a grid or add a shape."
        )
    ordered = sorted(scenarios.values(), key=lambda s: (s.suite, natural(s.id)))
    return Plan(
        run=config.run,
        backend=backend,
        scenarios=ordered,
        workloads=dict(sorted(workloads.items())),
        unsupported=dict(sorted(skipped.items())),
    )


def estimate(plan: Plan, config: RunConfig, probe: caps.HostProbe | None, warm_start: bool | None = None) -> str:
    """One line: about how long the sweep's jobs take on this host, and what that rests on. GEMM time
    uses the probe's 256^3 rates (large GEMMs usually run faster, tiny ones are dominated by overhead).
    warm_start (default: on, unless NEURONSWEEP_WARM_START=0): the stages fork from one
    process that imported torch once, instead of importing it in every job."""
    if probe is None:
        return f"no run-time estimate on {plan.backend}: only a backend that probes its host (cpu) has one"
    if warm_start is None:  # a backend that probes its host runs its workloads in the stage's process
        warm_start = os.environ.get(WARM_START) != "0"
    cap = config.capture
    executions = cap.warmup + cap.num_exec + cap.repeats * cap.iterations
    rates = probe.gemm_flops_per_s
    compute_s = sum(work_flops(s) * executions / rates[dtype_of(s)] for s in plan.workloads.values() if has_roofline(s))
    n = len(plan.workloads)
    # build, capture: torch; view, extract: the readers; under warm start once for the run
    imports_s = (1 if warm_start else 2 * n) * (probe.torch_import_s + probe.stack_import_s)
    ranks = sum(ranks_of(s) for s in plan.workloads.values() if described(s).ranks)
    imports_s += ranks * probe.torch_import_s  # every rank of a collective is a process of its own
    if cap.rounds_in_processes:  # each round imports torch again
        imports_s += n * cap.repeats * probe.torch_import_s
    dtypes = {s["dtype"] for s in plan.workloads.values()}
    calib_s = caps.CALIBRATION_BUDGET_S * (len(dtypes) + 1) if dtypes else 0.0  # + the copy bandwidth
    total = compute_s + imports_s + calib_s
    return (
        f"estimate: at least {_duration(total)} for {n} workloads on this host "
        f"({_duration(compute_s)} of workload time at the probed GEMM rates x {executions} executions each, "
        f"{_duration(imports_s)} of measured imports "
        + ("once (warm start)" if warm_start else f"over {4 * n} jobs")
        + f", calibration at most {calib_s:.0f} s; "
        "Snakemake's own per-job overhead and the profiler's are not included"
        + (", nor the collectives' transfers, which have no rate before they are measured)" if ranks else ")")
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
