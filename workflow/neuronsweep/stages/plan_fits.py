"""The plan against the memory its cases run in (backends.memory_budget of the settled config: this host's
RAM, or one logical NeuronCore's HBM): a layer, or a case run on ranks, that does not fit is unsupported
with its bytes and the bytes there are; any other case too large is refused before any job."""

from __future__ import annotations

import psutil

from neuronsweep.backends import RANK_PROCESS_BYTES, memory_budget
from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.stages.plan import Plan
from neuronsweep.workloads import described, layer, part_of, rank_buffer_bytes, ranks_of, working_set_bytes


def check_memory(plan: Plan, config: RunConfig) -> None:
    """The plan's cases against the memory one case runs in (backends.memory_budget of the settled config:
    this host's RAM, or one logical NeuronCore's HBM): a layer that does not fit is unsupported, any other
    case refused. Nothing is checked where each job settles its target on its node."""
    budget = memory_budget(plan.backend, config, psutil.virtual_memory().total)
    if budget is None:
        return
    layers_that_fit(plan, budget.bytes, budget.what, budget.gathers_experts, budget.checks_here)
    here = BACKENDS[plan.backend].probes_host  # its collectives' ranks are processes of this host
    if here or BACKENDS[plan.backend].neuron_device:  # else a rank per NeuronCore, each in that core's HBM
        ranks_that_fit(plan, budget.bytes, budget.what, processes_here=here)
    check_fits(plan, budget.bytes, f"of {budget.what}", budget.hint)


MEMORY_SHARE = 0.8  # of the memory one case may take (a cpu capture checks what is free again)


def ranks_that_fit(plan: Plan, memory_bytes: float, what: str, processes_here: bool = True) -> None:
    """A case run on ranks whose ranks exceed the memory they run in is unsupported, with the bytes it needs
    and the bytes there are. `processes_here`: every rank is a process of this host with its buffers (the host
    holds that many ranks at most: a parallel layout's tp 64 on a small machine); else each rank's buffers
    (a forward's weights and cache) sit in its own NeuronCore's HBM."""
    limit = MEMORY_SHARE * memory_bytes
    for wid, spec in list(plan.workloads.items()):
        if not described(spec).ranks:
            continue
        world = ranks_of(spec)
        need = world * (RANK_PROCESS_BYTES + rank_buffer_bytes(spec)) if processes_here else rank_buffer_bytes(spec)
        if need <= limit:
            continue
        del plan.workloads[wid]
        if processes_here:
            plan.unsupported[wid] = (
                f"{world} ranks of {wid}, a process each here, need {need / 2**30:,.1f} GiB, more than "
                f"{MEMORY_SHARE:.0%} of {what} ({memory_bytes / 2**30:,.1f} GiB); measure it on the instance "
                "(the neuron backend runs a rank per NeuronCore), or run fewer of a forward's layers (forward_layers)"
            )
        else:
            plan.unsupported[wid] = (
                f"each of the {world} ranks of {wid} holds {need / 2**30:,.1f} GiB (its weights, cache and hidden "
                f"states), more than {MEMORY_SHARE:.0%} of {what} ({memory_bytes / 2**30:,.1f} GiB); run fewer of "
                "its layers (forward_layers)"
            )


def layers_that_fit(
    plan: Plan, memory_bytes: float, what: str, gathers_experts: bool = False, checks_here: bool = False
) -> None:
    """A model's layer or head whose weights and working set exceed the memory it runs in is unsupported,
    with the bytes it needs and the bytes there are; the model's GEMMs still run. `gathers_experts`: torch-xla
    runs an MoE layer's experts as batched_mm, which holds a copy of the experts' weights per token;
    `checks_here`: the output check's float64 copy of the weights is held beside them (layer.reference)."""
    limit = MEMORY_SHARE * memory_bytes
    for wid, spec in list(plan.workloads.items()):
        if not described(spec).layer_split:
            continue
        part = part_of(spec)
        gathered = layer.gathered_expert_bytes(part) if gathers_experts else 0
        checked = part.params * 8 if checks_here else 0  # float64
        need = working_set_bytes(spec) + gathered + checked
        if need > limit:
            del plan.workloads[wid]
            copies = (
                f", {gathered / 2**30:,.1f} GiB of expert weights gathered per token (batched_mm)" if gathered else ""
            ) + (f", {checked / 2**30:,.1f} GiB of their float64 copy for the output check" if checked else "")
            plan.unsupported[wid] = (
                f"one {layer.part_label(part)} of {part.model} needs {need / 2**30:,.1f} GiB (its "
                f"{layer.weight_bytes(part) / 2**30:,.1f} GiB of {part.dtype} weights{copies}, its tensors and "
                f"cache), more than {MEMORY_SHARE:.0%} of {what} ({memory_bytes / 2**30:,.1f} GiB); measure it on "
                "a larger machine"
            )


def check_fits(plan: Plan, memory_bytes: float, what: str, hint: str) -> None:
    """A case whose working set (tensors and intermediates) exceeds the memory it runs in is refused
    before any job, naming the suite it comes from."""
    limit = MEMORY_SHARE * memory_bytes
    need = {wid: working_set_bytes(spec) for wid, spec in plan.workloads.items()}
    too_big = {wid: n for wid, n in need.items() if n > limit}
    if not too_big:
        return
    wid = max(too_big, key=lambda w: too_big[w])
    suite = next(sc.suite for sc in plan.scenarios if sc.workload_id == wid)
    more = f" (and {len(too_big) - 1} more)" if len(too_big) > 1 else ""
    raise UserError(
        f"config key 'suites.{suite}': case {wid}{more} needs {too_big[wid] / 2**30:,.1f} GiB at the least "
        f"(its tensors and intermediates), more than {MEMORY_SHARE:.0%} {what} ({memory_bytes / 2**30:,.1f} GiB); "
        "shrink or "
        f"drop that shape{hint}."
    )
