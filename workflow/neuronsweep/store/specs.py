"""A workload's spec as plan.json and build.json hold it, typed: one TypedDict per kind, `Spec` their union.

The spec is the canonical JSON a case is named, cached and rebuilt by (workloads.workload_id): its keys are
declared here, once per kind, so mypy checks every spec a kind's module builds and every key read of one
(here, beside the records that hold it, so they are typed by it too; a new kind adds its TypedDict).
A kind's module reads its spec once into its typed record (matmul.Gemm, layer.Part, ...) for its own
functions; code outside workloads/ passes a `Spec` through and asks the package (workloads/__init__.py).
Optional keys (NotRequired) appear only when not the default, so specs (and their ids) stay as they were.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class MatmulSpec(TypedDict):
    """C[m, n] = A[m, k] @ B[k, n] (suites matmul, tiling, llm, recompile)."""

    kind: Literal["matmul"]
    m: int
    k: int
    n: int
    dtype: str
    impl: NotRequired[str]  # nki; absent for the compiler's
    varies: NotRequired[str]  # python_int, python_float; absent for static
    tile_m: NotRequired[int]  # impl nki: a tile other than the kernel's largest
    tile_n: NotRequired[int]


class MlpSpec(TypedDict):
    """A gated MLP: batch, sequence, hidden and intermediate sizes."""

    kind: Literal["mlp"]
    b: int
    s: int
    h: int
    i: int
    dtype: str
    impl: NotRequired[str]


class LoopsSpec(TypedDict):
    """A loop pattern (vmap, scan, for_loop) over `steps` steps."""

    kind: Literal["loops"]
    pattern: str
    steps: int
    batch: int
    features: int
    dtype: str


class CollectiveSpec(TypedDict):
    """A collective among `world` ranks, `bytes` per rank."""

    kind: Literal["collective"]
    op: str
    bytes: int
    world: int
    dtype: str


class CustomSpec(TypedDict):
    """A user's function (and NKI kernel) at one grid point: pairs, not mappings, keep the config's order
    through canonical (sorted-key) JSON."""

    kind: Literal["custom"]
    name: str
    function: str
    source_sha256: str
    dims: list[list[Any]]  # [name, value]
    inputs: list[list[Any]]  # [name, shape]
    params: list[list[Any]]  # [name, value]
    dtype: str
    outputs: list[Any]
    flops: int | None
    flops_source: str
    impl: NotRequired[str]
    nki_kernel: NotRequired[str | None]


class _SliceSpec(TypedDict):
    """What a layer's and a forward's specs share (layer.Slice reads it)."""

    model: str
    hf_config: NotRequired[str]
    module: NotRequired[str]
    rank_config: NotRequired[dict[str, Any]]  # the rank's shard of the config's fields
    expert_ep: NotRequired[int]
    layout: NotRequired[str]  # tp8, tp8-ep4
    top_k: NotRequired[int]
    expert_tokens: NotRequired[int]
    source_sha256: str
    part: str  # layer, head or forward
    phase: str
    batch: int
    seq: int
    dtype: str
    hidden: int
    params: int
    routing: NotRequired[Any]  # routing.Policy: balanced, {zipf: s} or the counts read


class LayerSpec(_SliceSpec):
    """A kind of decoder layer of a model, or its head (no index)."""

    kind: Literal["layer"]
    vocab: int
    index: NotRequired[int]
    layer_kind: NotRequired[str]
    layers: NotRequired[int]
    kv_cache: NotRequired[list[list[int]] | None]
    gemms: list[dict[str, Any]]  # the probe's: gemm, m, k, n, count


class ForwardSpec(_SliceSpec):
    """A model's first `layers_run` decoder layers run on `world` ranks."""

    kind: Literal["forward"]
    world: int
    layers_run: int
    layer_kinds: list[str]
    sites: dict[str, dict[str, list[Any]]]  # per layer kind: its collectives as placed
    kv_caches: NotRequired[list[list[list[int]]]]


Spec = MatmulSpec | MlpSpec | LoopsSpec | CollectiveSpec | CustomSpec | LayerSpec | ForwardSpec
