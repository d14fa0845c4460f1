"""A model entry's deployment, whichever stack serves it: `parallel:` and `neuron_config:` are NxD
Inference's (workloads/nxd_inference.py, trn1 and inf2), `vllm:` is vLLM Neuron's (workloads/vllm_neuron.py,
trn2 and trn3 since SDK 2.34). The planner asks here and never names a stack."""

from __future__ import annotations

from neuronsweep.config.suites import ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.workloads import nxd_inference, vllm_neuron
from neuronsweep.workloads.probed import LayerCount
from neuronsweep.workloads.sharding import (
    NXD_INFERENCE,
    VLLM_NEURON,
    Collective,
    Deployed,
    Layout,
    RankConfig,
    Sharding,
    plain_grids,
)

FORMS = ("parallel", "neuron_config", "vllm")
_RULES = {NXD_INFERENCE: nxd_inference, VLLM_NEURON: vllm_neuron}


def entry_layout(entry: ModelEntry, where: str) -> Layout:
    """The entry as its deployment gives it (batch, seq and, from a file, dtype), its layouts and each
    phase's graphs; an entry without one runs whole, every phase over its batch x seq."""
    if sum(k in entry for k in FORMS) > 1:
        raise UserError(f"{where}: give one of parallel, neuron_config and vllm; each says the whole layout.")
    if "neuron_config" in entry:
        return nxd_inference.from_neuron_config(entry, where)
    if "vllm" in entry:
        return vllm_neuron.from_vllm(entry, where)
    if entry.get("parallel"):
        return nxd_inference.from_parallel(entry, where)
    return Layout(entry, [Deployed(Sharding(1), plain_grids(entry))])


def check(layout: Layout, family: str | None, nxd_ended: str | None, where: str) -> None:
    """The deployment against the run's instance family: NxD Inference's where SDK 2.34 ended it (`nxd_ended`,
    the target's sentence) is one sentence pointing to vllm:, and its TP degrees are the family's."""
    if layout.stack == NXD_INFERENCE:
        if nxd_ended:
            form = next(k for k in FORMS if k in layout.entry)
            raise UserError(
                f"{where}: {form}: is NxD Inference's deployment, legacy on {family}: {nxd_ended}; write it as "
                "vllm: (your `vllm serve` line, docs/your-code.md), or target trn1 or inf2."
            )
        nxd_inference.check_tp(layout.shardings, family, where)


def rank_config(config: dict, s: Sharding, phase: str, where: str) -> RankConfig:
    """One rank's shard of the model in `phase` under the layout's stack."""
    return _RULES[s.stack].rank_config(config, s, phase, where)


def collectives(
    config: dict, s: Sharding, phase: str, batch: int, seq: int, dtype: str, layer_kinds: list[LayerCount]
) -> list[Collective]:
    """Every collective one forward (one step) issues per rank under the layout's stack."""
    return _RULES[s.stack].collectives(config, s, phase, batch, seq, dtype, layer_kinds)


def fused(s: Sharding, phase: str, module: str, moe: bool) -> str | None:
    """The device kernel a GEMM runs inside under the layout's stack, None where it runs alone."""
    return vllm_neuron.fused(phase, module, moe) if s.stack == VLLM_NEURON else None
