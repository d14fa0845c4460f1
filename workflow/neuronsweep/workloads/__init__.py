"""Workload kinds: the unit that is compiled and profiled.

A workload is a canonical spec with a `kind` (plan.json's form, typed per kind in store/specs.py: `Spec`; one
read from JSON is checked by `as_spec`); its module (one per kind) declares what
the kind can do (`DESCRIPTOR`, workloads/descriptor.py: code outside this package asks `described(spec)`), reads
the spec once into its typed record (`RECORD`, which its functions take), and says how to name it (spec,
workload_id), shape it (tensor_shapes, input_names), count its work (flops, min_bytes, gemms for the tile
model), and build it (torch_module). Code outside this package asks the functions below, never a kind's module;
`unsupported` says what a backend cannot run. Analytic numbers (FLOPs, bytes) live here, beside the shapes they
come from, so extract never needs torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from neuronsweep.config.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import collective, custom, forward, layer, loops, matmul, mlp
from neuronsweep.workloads.descriptor import Workload
from neuronsweep.workloads.dtypes import DTYPE_BYTES, TORCH_DTYPES  # noqa: F401 (the package's names for them)

if TYPE_CHECKING:
    import numpy as np
    import torch

KINDS: dict[str, ModuleType] = {m.DESCRIPTOR.name: m for m in (matmul, mlp, loops, collective, custom, layer, forward)}
WORKLOADS: dict[str, Workload] = {name: module.DESCRIPTOR for name, module in KINDS.items()}


def as_spec(doc: object, where: str) -> Spec:
    """A spec read from JSON (a command's --spec, a record written by another version), refused in one sentence
    unless it is an object of a kind this version declares: past here it is typed by its kind (store/specs.py)."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in KINDS:
        said = f"a workload of kind {kind!r}, which this version does not run" if kind else "no object with a kind"
        raise UserError(f"{where}: {said} (kinds: {', '.join(KINDS)}); give a spec as plan.json holds it.")
    return cast(Spec, doc)


def described(spec: Mapping | None) -> Workload:
    """What the spec's kind can do (workloads/descriptor.py); a kind no module declares (an old or damaged
    record) can do nothing special."""
    kind = (spec or {}).get("kind")
    return WORKLOADS.get(str(kind), Workload(str(kind)))


def unsupported(spec: Spec, backend: str, slow_dtypes: dict[str, str] | None = None) -> str | None:
    """Why `backend` cannot run this workload, or None. slow_dtypes (a backend that probes its host): dtype
    -> why this host has no fast GEMM for it (caps.slow_dtypes, from a measured probe)."""
    if described(spec).ranks:
        return _collective_unsupported(spec, backend)
    runs = BACKENDS[backend]
    if runs.probes_host and slow_dtypes and spec["dtype"] in slow_dtypes:  # the host runs its GEMMs
        return slow_dtypes[spec["dtype"]]
    if runs.varies_unsupported and spec.get("varies"):
        return runs.varies_unsupported
    if spec.get("impl") == "nki" and not runs.neuron_device:
        return f"NKI kernels need a Neuron device; the {backend} backend cannot run them"
    return None


def _collective_unsupported(spec: Spec, backend: str) -> str | None:
    if not described(spec).bandwidth:  # a forward across ranks
        return BACKENDS[backend].ranked_forward_unsupported or BACKENDS[backend].collectives_unsupported
    op = collective_of(spec)
    if op.nbytes == 0:
        return f"{op.op} among {op.world} ranks needs at least one {op.dtype} element per rank"
    return BACKENDS[backend].collectives_unsupported


def collective_of(spec: Spec) -> collective.Op:
    """A collective's record (a kind whose descriptor says `bandwidth`): the op, its bytes, world and dtype."""
    if spec["kind"] != "collective":
        raise ValueError(f"a {spec['kind']} spec is not a collective")
    return collective.Op.of(spec)


def forward_of(spec: Spec) -> forward.Forward:
    """A forward across ranks' record (a kind run on ranks that is not a collective alone)."""
    if spec["kind"] != "forward":
        raise ValueError(f"a {spec['kind']} spec is not a forward across ranks")
    return forward.Forward.of(spec)


def part_of(spec: Spec) -> layer.Part:
    """A model layer's (or head's) record (a kind whose descriptor says `layer_split`)."""
    if spec["kind"] != "layer":
        raise ValueError(f"a {spec['kind']} spec is not a model's layer")
    return layer.Part.of(spec)


def rank_buffer_bytes(spec: Spec) -> int:
    """What one rank of a workload run on ranks holds beside its process (a collective's buffers; a forward's
    weights, cache and hidden states)."""
    return int(kind_of(spec).rank_buffer_bytes(record(spec)))


def dtype_of(spec: Spec) -> str:
    """The dtype a workload computes in (every kind has one)."""
    return str(spec["dtype"])


def uses_nki(spec: Spec) -> bool:
    """Whether the workload runs an NKI kernel (`impl: nki`): ours, or the user's own."""
    return spec.get("impl") == "nki"


def ranks_of(spec: Spec) -> int:
    """How many ranks run a workload: a workload run on ranks (workloads.described(spec).ranks) its world,
    any other one."""
    world = spec.get("world", 1)
    return world if isinstance(world, int) else 1


def tensor_bytes(spec: Spec) -> int:
    """Bytes of every input and output tensor together (what a run must hold in memory)."""
    return sum(math.prod(shape) for shape in tensor_shapes(spec).values()) * DTYPE_BYTES[dtype_of(spec)]


def working_set_bytes(spec: Spec) -> int:
    """tensor_bytes plus the intermediates a run holds at once (a kind's `intermediate_shapes`, e.g. the
    MLP's gate and up activations): the memory a case needs at the least."""
    kind = kind_of(spec)
    extra = kind.intermediate_shapes(record(spec)).values() if hasattr(kind, "intermediate_shapes") else ()
    return tensor_bytes(spec) + sum(math.prod(shape) for shape in extra) * DTYPE_BYTES[spec["dtype"]]


def record(spec: Spec) -> Any:
    """The spec as its kind's typed record (the module's RECORD: matmul.Gemm, layer.Part, ...), which the
    module's functions take."""
    return kind_of(spec).RECORD.of(spec)


def kind_of(spec: Spec) -> ModuleType:
    """The module of the spec's kind (workloads/matmul.py, mlp.py, ...): its FLOPs, bytes, shapes and program.
    Code outside this package asks the functions below, which say what a kind that declares nothing of it does."""
    return KINDS[spec["kind"]]


def tensor_shapes(spec: Spec) -> dict[str, tuple[int, ...]]:
    """Every input and output tensor's shape by name, inputs in call order."""
    return kind_of(spec).tensor_shapes(record(spec))


def input_names(spec: Spec) -> list[str]:
    """The inputs the workload's program is called with, in order."""
    return kind_of(spec).input_names(record(spec))


def torch_module(spec: Spec) -> torch.nn.Module:
    """The workload as a torch module taking its inputs (input_names) positionally."""
    return kind_of(spec).torch_module(record(spec))


def export_program(spec: Spec, example: tuple) -> torch.export.ExportedProgram:
    """The workload's program exported on `example` inputs: torch.export of its module, or its kind's own way
    (a model's layer: traced on fake tensors, saved without its weights)."""
    kind = kind_of(spec)
    if hasattr(kind, "export_program"):
        return kind.export_program(record(spec), example)
    import torch

    return torch.export.export(kind.torch_module(record(spec)), example)


def load_program(path: Path, spec: Spec) -> Callable:
    """The program export_program saved at `path` as a callable module (a model's layer: with its seeded
    weights back)."""
    kind = kind_of(spec)
    if hasattr(kind, "load_program"):
        return kind.load_program(path, record(spec))
    import torch

    return torch.export.load(str(path)).module()


def flops(spec: Spec) -> int:
    """The FLOPs of one call, for a workload with a roofline (has_roofline: a user's function whose FLOPs
    nobody counted has none)."""
    counted = kind_of(spec).flops(record(spec))
    if counted is None:
        raise ValueError(f"{workload_id(spec)} has no FLOPs counted: ask has_roofline first")
    return int(counted)


def min_bytes(spec: Spec) -> int:
    """The bytes one call must move at the least, at the workload's dtype."""
    return kind_of(spec).min_bytes(record(spec), DTYPE_BYTES[dtype_of(spec)])


def gemms(spec: Spec) -> list[tuple[int, int, int]]:
    """(M, K, N) of each GEMM of one call, for the tile model; none where the kind cannot see them."""
    return kind_of(spec).gemms(record(spec))


def counted_how(spec: Spec) -> tuple[str, str] | None:
    """(where the FLOPs came from, where the bytes came from) where the kind says (metrics.json's notes)."""
    kind = kind_of(spec)
    return kind.counted_how(record(spec)) if hasattr(kind, "counted_how") else None


def no_roofline_why(spec: Spec) -> str:
    """Why a workload without a roofline (has_roofline) has none."""
    kind = kind_of(spec)
    if hasattr(kind, "no_roofline_why"):
        return kind.no_roofline_why(record(spec))
    return (
        f"a {described(spec).name} moves data between ranks and does no FLOPs to place on a roofline; "
        "see algbw_bytes_per_s and busbw_bytes_per_s"
    )


def has_roofline(spec: Spec) -> bool:
    """Whether the workload does work a roofline measures (FLOPs over bytes): a collective moves data, and
    a user's function whose FLOPs nobody counted has none to place."""
    kind = kind_of(spec)
    return kind.has_roofline(record(spec)) if hasattr(kind, "has_roofline") else getattr(kind, "ROOFLINE", True)


def workload_id(spec: Spec) -> str:
    """The spec's id: the folder name of its results and the key its scenarios share."""
    return kind_of(spec).workload_id(record(spec))


def canonical(spec: Spec) -> str:
    """The spec as canonical JSON: sorted keys, no spaces. Used for cache keys and Snakemake params."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


NotComparable = custom.NotComparable  # an output that is not a tensor or a tuple of tensors: nothing to check


def has_reference(spec: Spec) -> bool:
    """Whether the kind has a float64 reference its output is checked against (a collective's ranks check
    theirs one by one: collective.rank_reference)."""
    return hasattr(kind_of(spec), "reference")


def checked_whole(spec: Spec) -> bool:
    """Whether its whole output is checked (a user's function, a model's part: its rows may mix), not rows."""
    return hasattr(kind_of(spec), "output_array")


def row_input(spec: Spec) -> str | None:
    """The input whose row i alone makes output row i (the check samples rows of it), or None."""
    return kind_of(spec).ROW_INPUT


def reference(spec: Spec, arrays: Mapping[str, np.ndarray]) -> Any:
    """The float64 result of the workload on `arrays` (its inputs by name); None where it varies on purpose.
    A kind checked whole may raise NotComparable."""
    return kind_of(spec).reference(record(spec), arrays)


def output_array(spec: Spec, out: object) -> Any:
    """A kind checked whole: its output as one flat float64 array (NotComparable where it is no tensor)."""
    return kind_of(spec).output_array(out)
