"""CPU torch-xla double for tests (see tests/standin/README.md): records torch ops between steps, each with the
modules it ran in (what XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 put in the HLO metadata: how-to-link-view-source-code)."""

import standin_cores
import torch
from torch.overrides import TorchFunctionMode

_claimed: list = []

_recorded: list = []
_scopes: list = []  # the modules the op being recorded runs in, outermost first: "<Class>[<call>]"
_calls: dict = {}


def _enter(module, args):
    cls = type(module).__name__
    _calls[cls] = _calls.get(cls, -1) + 1
    _scopes.append(f"{cls}[{_calls[cls]}]")


def _leave(module, args, output):
    _scopes.pop()


torch.nn.modules.module.register_module_forward_pre_hook(_enter)
torch.nn.modules.module.register_module_forward_hook(_leave, always_call=True)


class _Recorder(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name != "__get__" and not name.startswith("_"):  # skip property reads and torch internals
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            _recorded.append([name, shapes, "/".join([*_scopes, f"aten.{name}"])])
        return func(*args, **(kwargs or {}))


_mode = _Recorder()
_mode.__enter__()


def device():
    if not _claimed:  # the runtime (PJRT client) takes the visible NeuronCores when the device is first asked for
        standin_cores.claim()
        _claimed.append(True)
    return torch.device("cpu")


def sync():
    from .core import xla_model

    xla_model.mark_step()
