"""What the model probe (workloads/model_probe.py, in a child with torch) answers for one pass of a model, typed:
the plan, a layer's and a forward's spec, and each stack's collectives read it by these keys."""

from __future__ import annotations

from typing import Any, TypedDict


class ProbedGemm(TypedDict):
    """One GEMM shape a module ran, and how many times in the pass."""

    module: str  # relative to its decoder layer (a layer's), or the model's (the head's)
    gemm: str  # linear1, bmm2, ...: its order among the module's calls of that op
    m: int
    k: int
    n: int
    count: int


class LayerKind(TypedDict):
    """A distinct kind of decoder layer: layers whose GEMMs and attention type are the same."""

    index: int  # its first layer
    layers: int  # how many layers are of it
    members: list[int]  # every layer of it, by index
    kind: str  # dense, moe, dense-sliding, ...
    attention: str
    params: int
    kv_cache: list[list[int]] | None  # decode: [keys' shape, values' shape]
    gemms: list[ProbedGemm]


class Head(TypedDict):
    """The embedding, final norm and LM head."""

    params: int
    gemms: list[ProbedGemm]


class Traced(TypedDict):
    """One forward of a phase: its GEMMs, each MoE layer's load, its layer kinds and head, its sizes."""

    gemms: list[ProbedGemm]
    experts: dict[str, dict[str, Any]]  # MoE module -> experts, top_k, tokens, load
    layers: list[LayerKind]
    head: Head
    hidden: int
    vocab: int


class ProbedPass(Traced):
    """A traced forward at one phase, batch and seq: one pass of the probe's answer."""

    phase: str
    batch: int
    seq: int


class LayerCount(TypedDict):
    """What a stack's collective rules count of a model's layers: how many are of a kind, and whether it is MoE."""

    layers: int
    moe: bool
