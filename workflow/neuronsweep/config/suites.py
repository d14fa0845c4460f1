"""The suites a config lists, typed as config.schema.yaml declares them (each block and entry there refuses
other keys: `additionalProperties: false`), so mypy checks every key the plan reads. Validated configs have
the schema's defaults filled in; a key the schema leaves optional is NotRequired here. Values the plan
passes through whole (a search block, a model's parallel settings) stay JSON objects."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Shape(TypedDict):
    """One GEMM shape: C[m, n] = A[m, k] @ B[k, n]."""

    m: int
    k: int
    n: int


class MatmulSuite(TypedDict):
    """suites.matmul: a grid (cartesian) and explicit shapes, in every dtype and impl."""

    grid: NotRequired[dict[str, list[int]]]  # m, k, n -> their values
    shapes: NotRequired[list[Shape]]
    dtype: list[str]
    impl: list[str]
    nki_tile: NotRequired[dict[str, int]]  # m, n -> the NKI kernel's largest tile


class TilingSuite(TypedDict):
    """suites.tiling: each dim in `vary` at boundary * multiple + offset, the others at `base`."""

    base: dict[str, int]  # m, k, n, in the config's order (the labels keep it)
    boundaries: list[int]
    multiples: list[int]
    offsets: list[int]
    vary: list[str]
    dtype: list[str]


class LlmModel(TypedDict):
    """One model of suites.llm: the sizes its projections' GEMMs take."""

    name: str
    hidden: int
    intermediate: int
    heads: NotRequired[int]
    kv_heads: NotRequired[int]


class LlmSuite(TypedDict):
    """suites.llm: each model's projections at every batch (and seq, prefilling) bucket."""

    models: list[LlmModel]
    batch: list[int]
    seq: list[int]
    phases: list[str]
    projections: list[str]
    dtype: list[str]


class MlpConfig(TypedDict):
    """One gated MLP: batch, sequence, hidden and intermediate sizes."""

    b: int
    s: int
    h: int
    i: int


class MlpSuite(TypedDict):
    """suites.mlp."""

    configs: list[MlpConfig]
    impl: list[str]
    dtype: list[str]


class LoopsSuite(TypedDict):
    """suites.loops: each pattern at each size (steps x its factor)."""

    patterns: list[str]
    steps: int
    batch: int
    features: int
    sizes: dict[str, int]  # name -> factor of steps
    dtype: list[str]


class RecompileSuite(TypedDict):
    """suites.recompile: matmuls whose graph does or does not change between calls."""

    shapes: list[Shape]
    varies: list[str]
    dtype: list[str]


class CollectivesSuite(TypedDict):
    """suites.collectives: each op among each world at each size (a list, or {from, to} doubling)."""

    operations: list[str]
    sizes: list[int] | dict[str, int]
    world_sizes: list[int]
    dtype: list[str]


class CustomEntry(TypedDict):
    """One entry of suites.custom: a user's function (and NKI kernel) over a grid of dims and params."""

    name: str
    function: str
    nki_kernel: NotRequired[str]
    inputs: dict[str, list[int | str]]  # argument -> its shape, each dim a number or an expression of the grid
    grid: dict[str, list[int]]
    params: dict[str, list[Any]]  # keyword -> its values
    flops: NotRequired[int | str]  # a number or an expression of the grid
    dtype: list[str]
    impl: list[str]
    search: NotRequired[dict[str, Any]]  # the search block (search/space.py parses it)


class SloEntry(TypedDict):
    """A model entry's `slo:`: the latency to meet over a mix of requests, on an instance type."""

    ttft_ms: float
    itl_ms: float
    prompt_tokens: int | list[int]
    output_tokens: int | list[int]
    instance: str


class ModelEntry(TypedDict):
    """One entry of suites.model, and what the plan settles in it for one deployment (NotRequired below the
    line: the rank's config, its layout, the stack's labels)."""

    name: str
    hf_config: NotRequired[str]
    module: NotRequired[str]
    batch: list[int]
    seq: list[int]
    phases: list[str]
    routing: Any  # routing.Policy: balanced, {zipf: s} or {counts: [...] | file}
    layers: bool
    forward_layers: int | str  # a count, or auto
    dtype: list[str]
    parallel: NotRequired[dict[str, Any]]  # NxD Inference's settings
    neuron_config: NotRequired[str]  # a saved neuron_config.json
    vllm: NotRequired[str | list[str] | dict[str, Any]]  # vLLM Neuron's serve command, or its settings
    slo: NotRequired[SloEntry]
    tune: NotRequired[dict[str, Any]]
    # settled by the plan for one deployment
    rank_config: NotRequired[dict[str, Any]]  # the rank's shard of the config's fields
    expert_ep: NotRequired[int]
    layout: NotRequired[str]  # tp8, tp8-ep4
    top_k: NotRequired[int]
    expert_tokens: NotRequired[int]
    vllm_labels: NotRequired[dict[str, Any]]


class Suites(TypedDict, total=False):
    """suites: each a block (a list of entries for custom and model); at least one."""

    matmul: MatmulSuite
    tiling: TilingSuite
    llm: LlmSuite
    mlp: MlpSuite
    loops: LoopsSuite
    recompile: RecompileSuite
    custom: list[CustomEntry]
    model: list[ModelEntry]
    collectives: CollectivesSuite


class ConfigDocument(TypedDict, total=False):
    """A config file as the schema's top level declares it (no other key passes it); once validated, every
    key but search has its default. config/run_config.RunConfig is the record the stages read; this is the
    document a search writes for each round and plan.json keeps."""

    run: str
    backend: str
    cache_dir: str
    capture: dict[str, Any]
    neuron: dict[str, Any]
    xla: dict[str, Any]
    timeouts: dict[str, float]
    track_patterns: dict[str, str]
    search: list[dict[str, Any]]  # run-level searches (search/driver.py's SettingsSearch)
    suites: Suites
