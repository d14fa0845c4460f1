"""xla_model double: mark_step() turns the recorded ops into one "compiled graph" (a NEFF file)."""

import fcntl
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
    recorded, torch_xla._recorded[:] = list(torch_xla._recorded), []
    if not recorded:
        return
    ops = [r[:2] for r in recorded]
    # the framework op names reach the NEFF only from a graph traced with both debug variables set
    # (how-to-link-view-source-code: "set these environment variables before compiling your NEFF")
    debug = os.environ.get("XLA_IR_DEBUG") == "1" and os.environ.get("XLA_HLO_DEBUG") == "1"
    names = [r[2] if len(r) > 2 else f"aten.{r[0]}" for r in recorded] if debug else None
    flags = _flags()
    cache_url = os.environ.get("NEURON_COMPILE_CACHE_URL")
    if not cache_url:
        raise RuntimeError(
            "stand-in: NEURON_COMPILE_CACHE_URL unset; refusing to use the shared /var/tmp/neuron-compile-cache"
        )
    graph_hash = str(
        int(hashlib.sha256(json.dumps(ops if names is None else [ops, names]).encode()).hexdigest()[:15], 16)
    )
    flags_hash = hashlib.md5(flags.encode()).hexdigest()[:8]
    entry = Path(cache_url) / "neuronxcc-0.0.0.0+standin" / f"MODULE_{graph_hash}+{flags_hash}"
    neff = entry / "model.neff"
    entry.mkdir(parents=True, exist_ok=True)
    with open(entry / "compile.lock", "a") as lock:  # ranks compiling one graph: the first compiles, the rest wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if neff.is_file():
            print(f"Using a cached neff at {neff}")
            return
        _compile(ops, flags, neff, graph_hash, names)


def _compile(ops, flags, neff, graph_hash, names=None):
    started = time.perf_counter_ns()
    graph_id = _graph_ids["next"]
    _graph_ids["next"] += 1
    header = {"graph": f"SyncTensorsGraph.{graph_id}", "ops": ops, "cc_flags": flags}
    if names:
        header["framework_names"] = names
    content = b"NEFF\0" + json.dumps(header).encode()
    neff.write_bytes(content)
    if os.environ.get("NEURON_FRAMEWORK_DEBUG") == "1":
        Path(f"MODULE_{graph_id}_SyncTensorsGraph.{graph_id}_{graph_hash}.neff").write_bytes(content)
    metrics.record("CompileTime", time.perf_counter_ns() - started)


# Collectives (torch_xla.core.xla_model's signatures), over the "xla" process group that
# torch_xla.distributed.xla_backend registers: gloo between the rank processes. Each is recorded as
# an op of the graph, so the "compiled" NEFF of a collective names it.
REDUCE_SUM = "sum"


def _record(name, tensor):
    torch_xla._recorded.append([f"xla_collective.{name}", [list(tensor.shape)]])


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    import torch.distributed as dist

    assert reduce_type == REDUCE_SUM, reduce_type
    out = inputs.clone()
    dist.all_reduce(out)
    _record("all_reduce", inputs)
    return out * scale if scale != 1.0 else out


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    import torch
    import torch.distributed as dist

    out = torch.empty((value.shape[0] * dist.get_world_size(), *value.shape[1:]), dtype=value.dtype)
    dist.all_gather_into_tensor(out, value.contiguous())
    _record("all_gather", value)
    return out


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None, pin_layout=True):
    import torch
    import torch.distributed as dist

    assert reduce_type == REDUCE_SUM and scatter_dim == 0 and shard_count == dist.get_world_size()
    out = torch.empty((input.shape[0] // shard_count, *input.shape[1:]), dtype=input.dtype)
    dist.reduce_scatter_tensor(out, input.contiguous())
    _record("reduce_scatter", input)
    return out * scale if scale != 1.0 else out


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None, pin_layout=True):
    import torch
    import torch.distributed as dist

    assert split_dimension == concat_dimension == 0 and split_count == dist.get_world_size()
    out = torch.empty_like(value)
    dist.all_to_all_single(out, value.contiguous())
    _record("all_to_all", value)
    return out


def rendezvous(tag, payload=b"", replicas=[]):  # noqa: B006 (torch-xla's own signature)
    import torch.distributed as dist

    dist.barrier()
    return [payload] * dist.get_world_size()
