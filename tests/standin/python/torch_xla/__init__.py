"""CPU torch-xla double for tests (see tests/standin/README.md): records torch ops between steps."""

import standin_cores
import torch
from torch.overrides import TorchFunctionMode

_claimed: list = []

_recorded: list = []


class _Recorder(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name != "__get__" and not name.startswith("_"):  # skip property reads and torch internals
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            _recorded.append([name, shapes])
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
