"""xla_model double: mark_step() turns the recorded ops into one "compiled graph" (a NEFF file)."""

import hashlib
import json
import os
import re
import time
from pathlib import Path

import torch_xla
from torch_xla.debug import metrics

TARGETS = ("trn1", "trn1n", "trn2", "inf2")
_graph_ids = {"next": 1}


def xla_device():
    return torch_xla.device()


def wait_device_ops():
    pass


def _flags() -> str:
    flags = os.environ.get("NEURON_CC_FLAGS", "")
    m = re.search(r"--target[ =](\S+)", flags)
    if not m or m.group(1) not in TARGETS:
        raise RuntimeError(f"neuronx-cc: --target must be one of {TARGETS} (NEURON_CC_FLAGS={flags!r})")
    return flags


def mark_step():
    ops, torch_xla._recorded[:] = list(torch_xla._recorded), []
    if not ops:
        return
    flags = _flags()
    cache_url = os.environ.get("NEURON_COMPILE_CACHE_URL")
    if not cache_url:
        raise RuntimeError("stand-in: NEURON_COMPILE_CACHE_URL unset; refusing to use the shared "
                           "/var/tmp/neuron-compile-cache")
    graph_hash = str(int(hashlib.sha256(json.dumps(ops).encode()).hexdigest()[:15], 16))
    flags_hash = hashlib.md5(flags.encode()).hexdigest()[:8]
    entry = Path(cache_url) / "neuronxcc-0.0.0.0+standin" / f"MODULE_{graph_hash}+{flags_hash}"
    neff = entry / "model.neff"
    if neff.is_file():
        print(f"Using a cached neff at {neff}")
        return
    started = time.perf_counter_ns()
    graph_id = _graph_ids["next"]
    _graph_ids["next"] += 1
    content = b"NEFF\0" + json.dumps({"graph": f"SyncTensorsGraph.{graph_id}", "ops": ops,
                                      "cc_flags": flags}).encode()
    entry.mkdir(parents=True, exist_ok=True)
    neff.write_bytes(content)
    if os.environ.get("NEURON_FRAMEWORK_DEBUG") == "1":
        Path(f"MODULE_{graph_id}_SyncTensorsGraph.{graph_id}_{graph_hash}.neff").write_bytes(content)
    metrics.record("CompileTime", time.perf_counter_ns() - started)
