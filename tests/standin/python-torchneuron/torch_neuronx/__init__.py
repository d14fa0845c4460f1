"""TorchNeuron double (torch-neuronx 2.13 of SDK 2.33; a test double, see tests/standin/README.md).

Like the real package it registers a `neuron` device (PyTorch's PrivateUse1, renamed) with a
`torch.neuron` module, and a `neuron` torch.compile backend. Executing on the CPU, the lighter way:
no C++ extension (PyTorch's open-registration test extension needs a compiler and a build), but a
wrapper tensor subclass whose `.device` is `neuron:0` and whose data is a host tensor; `Tensor.to`
learns the `neuron` device, every op on such tensors runs on the host copy. The device has a guard and
allocates on the host (PyTorch's Python-backend registration, `torch._C._acc`), so tensors made on it,
as a model's masks and positions are, work too. Limits, said plainly: `torch.neuron.is_available()` is
False (True would send Dynamo to the accelerator's C++ stream API, which a Python-only device cannot
have), and grad mode must be off on the device (autograd is not modelled). Neither matters to an
inference benchmark; both fail loudly.

The compile backend, as the docs and the real cache behave:
- the compiler's command line is TorchNeuron's own flags, then NEURON_CC_FLAGS appended ("torch.compile on
  Neuron"): `--target` from the runtime (the machine neuron-ls lists: trn2 or trn3 only, TorchNeuron has no
  trn1/inf2), `--logical-nc-config` from NEURON_LOGICAL_NC_CONFIG (else the machine's), `-O2 --model-type
  transformer --auto-cast=none`; the last value of a flag wins, and the NEFF records the whole line;
- a NEFF's input names are its own (`input0`, `input1`, ...: the docs name none, so not the PyTorch
  argument names), recorded in the NEFF for the profiler's capture to check;
- TORCH_NEURONX_NEFF_DISABLE_CACHE=1 writes no NEFF to TORCH_NEURONX_NEFF_CACHE_DIR;
- one NEFF per compiled graph in TORCH_NEURONX_NEFF_CACHE_DIR (default /tmp/neff_cache), sharded
  `ab/cd/<key>.neff`; the key hashes the graph and its input shapes only, NOT the flags nor the compiler
  version (so a shared folder hands back a NEFF compiled with other flags); a copy under
  TORCH_NEURONX_DEBUG_DIR/neff/proc_<rank>/ when TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1;
- Dynamo recompiles on a new shape (and the backend writes a new NEFF);
- a failed compile raises unless TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (then it runs eagerly);
- executing a NEFF whose LNC differs from the runtime's NEURON_LOGICAL_NC_CONFIG (default: the machine's,
  bin/neuron-ls) fails as the runtime does;
- the runtime's inspect mode (NEURON_RT_INSPECT_ENABLE=1, NEURON_RT_INSPECT_OUTPUT_DIR), in the two device
  modes of NEURON_RT_INSPECT_DEVICE_PROFILE, each written as its page shows it:
  `model` (or 1): execution NUM_WARMUP+1 of each NEFF per core as `neff_<h>.neff` beside
  `<h>_instid_0_vnc_<core>.ntff` in `i-<id>_pid_<pid>/` (Neuron Explorer get-started). The distributed
  how-to says session mode is "required on PJRT runtimes (PyTorch native, JAX) for the runtime to emit the
  device trace", so here, a PyTorch-native process, model mode writes the system trace (`ntrace.pb`,
  `trace_info.pb`) and no device trace; STANDIN_INSPECT_MODEL_TRACE=1 takes the get-started page's reading
  (a device trace in model mode) instead. The docs disagree; a device settles it (the field test's line).
  `session`: every execution of the process on core c in one `profile_nc_<c>_session_0.ntff` beside
  `neff_<h>_vnc_<c>.neff` under `i-<id>_pid_<pid>/<timestamp>/` (the capture how-to's expected output);
  NUM_WARMUP is model-only and refused with session, as a setting that does not apply.
  A rank's NTFF says its rank and core, as a multi-worker capture's do.
- every NEFF carries a uuid of its compilation (profile schema reference, NeffHeader): two compilations of
  one graph (two ranks) are two NEFFs, and a view pairing an NTFF with the other one is refused.

The `neuron` process group ("How to use torch.distributed on Neuron"): gloo on the host data, so the
ranks exchange real values; under torchrun an unset NEURON_RT_VISIBLE_CORES becomes LOCAL_RANK (the
real default, which takes core LOCAL_RANK of the machine whatever slot the parent holds). `Tensor.copy_`
is patched like `Tensor.to`: C++ asks for the device's guard before any dispatch.
"""

import hashlib
import json
import os
import re
import shutil
import time
import types
import uuid
from pathlib import Path

import standin_cores
import torch
from torch.utils._pytree import tree_map

__version__ = "2.13.3"
if "LOCAL_RANK" in os.environ and "NEURON_RT_VISIBLE_CORES" not in os.environ:
    os.environ["NEURON_RT_VISIBLE_CORES"] = os.environ["LOCAL_RANK"]  # TorchNeuron's default under torchrun
torch.utils.rename_privateuse1_backend("neuron")
NEURON = torch.device("neuron", 0)
TARGETS = ("trn2", "trn3")
_claimed = []
_session = None  # the inspect session's timestamp folder, one per process


def _claim():
    if not _claimed:  # the runtime takes the visible NeuronCores when the device is first used
        standin_cores.claim()
        _claimed.append(True)


def _host_device(x):
    return torch.device("cpu") if isinstance(x, torch.device) and x.type == "neuron" else x


class NeuronTensor(torch.Tensor):
    """A tensor on `neuron:0` whose data lives in a host tensor."""

    @staticmethod
    def __new__(cls, host):
        return torch.Tensor._make_wrapper_subclass(
            cls, host.shape, strides=host.stride(), dtype=host.dtype, device=NEURON, requires_grad=False
        )

    def __init__(self, host):
        self.host = host

    def __repr__(self):
        return f"tensor(on neuron:0, {tuple(self.shape)}, {self.dtype})"

    def __tensor_flatten__(self):
        return ["host"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return NeuronTensor(inner["host"])

    def __getitem__(self, index):
        """Indexing, as on any PyTorch device ("What is TorchNeuron?": standard PyTorch runs on `neuron`);
        C++'s getitem asks for the device's guard first, which a Python-only device cannot give."""
        return NeuronTensor(self.host[tree_map(_unwrap, index)])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.is_grad_enabled() and any(isinstance(a, NeuronTensor) and a.requires_grad for a in args):
            raise RuntimeError("stand-in neuron device: autograd is not modelled; run under torch.no_grad()")
        to_host = kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cpu"
        if func is torch.ops.aten.histc.default and not args[0].dtype.is_floating_point:
            # integer bins, as an accelerator counts them (transformers' grouped experts call it so off the
            # CPU); the host's histc has floating kernels only: count in float, give the dtype asked
            host = _unwrap(args[0])
            return NeuronTensor(func(host.float(), *args[1:], **kwargs).to(host.dtype))
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if to_host:
            return out
        return tree_map(lambda x: NeuronTensor(x) if isinstance(x, torch.Tensor) else x, out)  # a fake one too


def _unwrap(x):
    if type(x) is not NeuronTensor and isinstance(x, torch.Tensor) and x.device.type == "neuron":
        # made on the device while Dynamo traces (a fake tensor: the factory ops above are not called
        # then), beside a NeuronTensor whose data is the host's: the same tensor, on the host
        return torch.ops.aten._to_copy.default(x, device="cpu")
    return _host_device(x.host if isinstance(x, NeuronTensor) else x)


_host_to = torch.Tensor.to


def _to(self, *args, **kwargs):
    if torch.compiler.is_compiling():
        return _traced_to(self, *args, **kwargs)
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None and device.type == "neuron":
        _claim()
        host = self.host if isinstance(self, NeuronTensor) else self
        return NeuronTensor(_host_to(host, dtype=dtype, copy=True) if dtype is not None else host.detach().clone())
    return _host_to(self, *args, **kwargs)


def _traced_to(self, *args, **kwargs):
    """`Tensor.to` as Dynamo traces it inside a compiled graph (it cannot trace the builtin behind the patch
    above): the same arguments, as the one op `to` becomes (`aten._to_copy`), or the tensor itself when
    nothing changes; on the device the graph's op runs on the host data like every other."""
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif isinstance(arg, torch.Tensor):
            dtype, device = arg.dtype, arg.device
        elif arg is not None:
            device = arg
    device = torch.device(device) if isinstance(device, str) else device
    if (dtype is None or dtype == self.dtype) and (device is None or device == self.device) and not kwargs.get("copy"):
        return self
    return torch.ops.aten._to_copy.default(self, dtype=dtype or self.dtype, device=device or self.device)


_host_copy_ = torch.Tensor.copy_


def _copy_(self, src, non_blocking=False):
    """`Tensor.copy_` asks C++ for the device's guard before any dispatch, which a Python-only device
    cannot give: into a neuron tensor, copy into its host data."""
    if isinstance(self, NeuronTensor):
        _host_copy_(self.host, src.host if isinstance(src, NeuronTensor) else src, non_blocking)
        return self
    return _host_copy_(self, src.host if isinstance(src, NeuronTensor) else src, non_blocking)


torch.Tensor.to = _to
torch.Tensor.copy_ = _copy_
device_module = types.ModuleType("torch.neuron")
device_module.is_available = lambda: False  # see the module docstring
device_module.device_count = lambda: standin_cores.CORES
device_module.current_device = lambda: 0
device_module.synchronize = lambda device=None: None  # execution is synchronous on the host
torch._register_device_module("neuron", device_module)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return False  # see the module docstring

    def has_primary_context(self, device_index) -> bool:
        return True

    def is_built(self) -> bool:
        return True


torch._C._acc.register_python_privateuseone_hook(_Hooks())  # PyTorch's dummy hook says available: ours not
torch._C._acc.register_python_privateuseone_device_guard(torch.utils.backend_registration._DummyDeviceGuard())
device_module._is_in_bad_fork = lambda: False
device_module.manual_seed_all = lambda seed: None  # the host's generator makes the data here

# A tensor made on the device (torch.arange(n, device="neuron"), as transformers' masks and positions are):
# C++ allocates it through empty/empty_strided and fills it through _copy_from, which a Python-only device
# answers on the host.
_factories = torch.library.Library("aten", "IMPL")
_factories.impl(
    "empty.memory_format",
    lambda size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None: NeuronTensor(
        torch.empty(size, dtype=dtype)
    ),
    "PrivateUse1",
)


def _copy_from(src, dst, non_blocking=False):
    """The copy C++ makes from host data into a tensor made on the device (torch.tensor(data, device=...))."""
    _host_copy_(dst.host, _unwrap(src), non_blocking)
    return dst


_factories.impl("_copy_from", _copy_from, "PrivateUse1")
_factories.impl(
    "empty_strided",
    lambda size, stride, dtype=None, layout=None, device=None, pin_memory=None: NeuronTensor(
        torch.empty_strided(size, stride, dtype=dtype)
    ),
    "PrivateUse1",
)


# ------------------------------------------------------------------------------- the compile backend


def _last(flags: str, pattern: str, default: str) -> str:
    found = re.findall(pattern, flags)
    return found[-1] if found else default


def _cc_flags() -> tuple[str, int]:
    """The compiler's command line: TorchNeuron's own flags, then NEURON_CC_FLAGS (the last value wins)."""
    target = standin_cores.MACHINE
    if target not in TARGETS:
        raise RuntimeError(f"torch_neuronx: TorchNeuron runs on {'|'.join(TARGETS)} only; this machine is {target}")
    own = f"--target {target} --logical-nc-config {_runtime_lnc()} -O2 --model-type transformer --auto-cast=none"
    flags = f"{own} {os.environ.get('NEURON_CC_FLAGS', '')}".strip()
    target = _last(flags, r"--target[ =](\S+)", target)
    if target not in TARGETS:
        raise RuntimeError(f"neuronx-cc: TorchNeuron compiles for --target {'|'.join(TARGETS)} ({flags!r})")
    return flags, int(_last(flags, r"(?:--logical-nc-config|--lnc|-lnc)[ =](\d)", "2"))


def _ops(gm) -> list:
    """The graph's calls with their input shapes (what the profiler double reads its numbers from)."""
    ops = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
        shapes = [
            list(a.meta["example_value"].shape)
            for a in node.args
            if hasattr(a, "meta") and isinstance(a.meta.get("example_value"), torch.Tensor)
        ]
        if name == "linear" and len(shapes) >= 2:  # x @ w.T
            name, shapes = "matmul", [shapes[0], shapes[1][::-1]]
        ops.append([name, shapes])
    return ops


def _framework_names(gm) -> list:
    """Each op of _ops named by the modules it ran in, `<Class>[<n>]/.../aten.<op>` (the profile schema
    reference's framework_name example; n counts that class's modules in the graph)."""
    seen: dict = {}
    names = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
        scopes = []
        for path, cls in (node.meta.get("nn_module_stack") or {}).values():
            index = seen.setdefault(cls.__name__, {}).setdefault(path, len(seen[cls.__name__]))
            scopes.append(f"{cls.__name__}[{index}]")
        names.append("/".join([*scopes, f"aten.{name}"]))
    return names


def _neff_cache() -> Path:
    return Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "/tmp/neff_cache"))


def _compile(gm, example_inputs) -> Path:
    flags, lnc = _cc_flags()
    signature = [[list(t.shape), str(t.dtype)] for t in example_inputs]
    key = hashlib.sha256((gm.code + json.dumps(signature)).encode()).hexdigest()  # no flags: as the real key
    neff = _neff_cache() / key[:2] / key[2:4] / f"{key}.neff"
    if os.environ.get("TORCH_NEURONX_NEFF_DISABLE_CACHE") == "1":
        neff = Path(os.environ.get("TORCH_NEURONX_DEBUG_DIR", "/tmp/neuron_backend")) / "uncached" / f"{key}.neff"
    elif neff.is_file():
        print(f"torch_neuronx: NEFF cache hit {neff}")
        return neff
    header = {
        "graph": f"torchneuron_{key[:12]}",
        "producer": "torch_neuronx.backend",
        "ops": _ops(gm),
        "cc_flags": flags,
        "lnc": lnc,
        "inputs": signature,
        "input_names": [f"input{i}" for i in range(len(signature))],
        "uuid": uuid.uuid4().hex,  # per compilation (NeffHeader)
    }
    # descriptive layer names in the profile for a NEFF compiled with both debug variables set, recommended for
    # every capture method, native PyTorch's too (neuron-explorer/how-to-profile-workload, "Setup (all methods)")
    if os.environ.get("XLA_IR_DEBUG") == "1" and os.environ.get("XLA_HLO_DEBUG") == "1":
        header["framework_names"] = _framework_names(gm)
    neff.parent.mkdir(parents=True, exist_ok=True)
    tmp = neff.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(b"NEFF\0" + json.dumps(header).encode())
    os.replace(tmp, neff)
    if os.environ.get("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS") == "1":
        debug = Path(os.environ.get("TORCH_NEURONX_DEBUG_DIR", "/tmp/neuron_backend"))
        proc = debug / "neff" / f"proc_{os.environ.get('RANK', '0')}"
        proc.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(neff, proc / f"{header['graph']}_{time.time_ns()}.neff")
    return neff


def _runtime_lnc() -> int:
    return int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", standin_cores.LNC))


class _Executable:
    """A loaded NEFF: checks the runtime's LNC, counts executions for the inspect mode, runs on the host."""

    def __init__(self, neff: Path, gm):
        self.neff, self.gm, self.executions = neff, gm, 0
        self.lnc = json.loads(neff.read_bytes()[5:])["lnc"]

    def __call__(self, *args):
        if _runtime_lnc() != self.lnc:
            raise RuntimeError(
                f"NRT: nrt_load: NEFF {self.neff.name} was compiled for LNC {self.lnc} but the runtime runs "
                f"NEURON_LOGICAL_NC_CONFIG={_runtime_lnc()}"
            )
        self.executions += 1
        out = self.gm.forward(*args)
        self._inspect()
        return out

    def _inspect(self):
        if os.environ.get("NEURON_RT_INSPECT_ENABLE") != "1":
            return
        mode = os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE", "0")
        root = Path(os.environ.get("NEURON_RT_INSPECT_OUTPUT_DIR", "./output"))
        root = root / f"i-0000000000000000_pid_{os.getpid()}"
        root.mkdir(parents=True, exist_ok=True)
        for name in ("ntrace.pb", "trace_info.pb"):  # the system profile (on whenever inspect is)
            (root / name).write_bytes(b"system trace (stand-in)")
        data = self.neff.read_bytes()
        h = str(int(hashlib.md5(data).hexdigest()[:12], 16))
        core = standin_cores.visible()[0]
        body = {
            "ntff_version": 6,
            "neff_sha256": hashlib.sha256(data).hexdigest(),
            "single_io": False,
            "dge_notifs": os.environ.get("NEURON_RT_ENABLE_DGE_NOTIFICATIONS") == "1",
            "inspect": mode,
        }
        if "RANK" in os.environ:  # a worker of a collective: where it ran, as the capture's rank profiles say
            body.update(rank=int(os.environ["RANK"]), world=int(os.environ["WORLD_SIZE"]))
            body.update(nc_idx=core % standin_cores.CORES_PER_DEVICE)
            body["nd_idx"] = core // standin_cores.CORES_PER_DEVICE
        if mode == "session":
            if "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP" in os.environ:
                raise RuntimeError("NRT: NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP applies to model mode only")
            global _session
            _session = _session or time.strftime("%Y%m%d_%H%M%S")
            out = root / _session
            out.mkdir(exist_ok=True)
            (out / f"neff_{h}_vnc_{core}.neff").write_bytes(data)
            # the whole session on this core: every execution so far, rewritten as the session goes on
            body["executions"] = self.executions
            (out / f"profile_nc_{core}_session_0.ntff").write_bytes(b"NTFF\0" + json.dumps(body).encode())
            return
        warmup = int(os.environ.get("NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP", "0"))
        if mode not in ("1", "model") or self.executions != warmup + 1:
            return
        if os.environ.get("STANDIN_INSPECT_MODEL_TRACE") != "1":
            return  # PJRT (PyTorch native): no device trace in model mode (the distributed how-to)
        (root / f"neff_{h}.neff").write_bytes(data)
        body["num_exec"] = self.executions
        (root / f"{h}_instid_0_vnc_{core}.ntff").write_bytes(b"NTFF\0" + json.dumps(body).encode())


def neuron_backend(gm, example_inputs):
    if torch.is_grad_enabled():
        raise RuntimeError("stand-in neuron backend: compile under torch.no_grad() (autograd is not modelled)")
    try:
        neff = _compile(gm, example_inputs)
    except Exception:
        if os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1") == "0":
            return gm.forward  # the docs' fallback: eager execution of the original graph
        raise
    return _Executable(neff, gm)


torch._dynamo.register_backend(neuron_backend, name="neuron")


# ------------------------------------------------------------------------------- the process group


def _process_group(store, rank, size, timeout):
    """The `neuron` process group, as gloo on the host data: the ranks exchange real values. Mapped for
    `cpu` too, since a collective on neuron tensors reaches the group with their host tensors."""
    return torch.distributed.ProcessGroupGloo(store, rank, size, timeout)


if torch.distributed.is_available() and not hasattr(torch.distributed.Backend, "NEURON"):
    torch.distributed.Backend.register_backend("neuron", _process_group, devices=["cpu", "neuron"])
