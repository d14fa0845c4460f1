"""Workload kinds: the unit that is compiled and profiled.

A workload is a canonical spec dict with a `kind`; its module (one per kind) says how to name it,
count its work, and build it for a framework. Analytic numbers (FLOPs, bytes) live here, beside the
shapes they come from, so extract never needs torch.
"""

from __future__ import annotations

import json
from types import ModuleType

from . import matmul

KINDS: dict[str, ModuleType] = {"matmul": matmul}

# bytes per element; torch attribute names are resolved lazily by the framework code
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def kind_of(spec: dict) -> ModuleType:
    return KINDS[spec["kind"]]


def workload_id(spec: dict) -> str:
    return kind_of(spec).workload_id(spec)


def canonical(spec: dict) -> str:
    """The spec as canonical JSON: sorted keys, no spaces. Used for cache keys and Snakemake params."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
