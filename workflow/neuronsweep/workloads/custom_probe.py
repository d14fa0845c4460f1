"""What a custom suite's functions are, found when the run is planned, in a child process (importing torch
and the user's code would cost the planner seconds and could take it down): each reference loads and is
callable, its inputs and params are parameters of it (inspect.signature), and each case, run once on
PyTorch's fake tensors (no data, no memory), gives its output shapes and the FLOPs that
torch.utils.flop_counter counts. A case whose function raises on fake tensors is kept: its build runs
the function for real and fails with the user's traceback, that case only.

    python -m neuronsweep.workloads.custom_probe < request.json > answer.json
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType

from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import TORCH_DTYPES
from neuronsweep.workloads.user_code import answer_stdin, load


def _signature_problem(fn: Callable, where: str, inputs: list[str], params: list[str]) -> str | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: the call itself will say
    kinds = {n: p.kind for n, p in sig.parameters.items()}
    open_kw = inspect.Parameter.VAR_KEYWORD in kinds.values()
    shown = f"{getattr(fn, '__name__', 'the function')}{sig}"
    for name in inputs:
        if name not in kinds and not open_kw:
            return f"{where}: input {name!r} is not a parameter of {shown}; rename it in inputs."
        if kinds.get(name) == inspect.Parameter.POSITIONAL_ONLY:
            return f"{where}: input {name!r} of {shown} is positional-only; inputs are passed by name."
    for name in params:
        if (name not in kinds and not open_kw) or kinds.get(name) == inspect.Parameter.POSITIONAL_ONLY:
            return f"{where}: param {name!r} is not a keyword of {shown}; remove it or add it to the function."
    return None


def _trace(torch: ModuleType, fn: Callable, case: dict) -> dict:
    """One case on fake tensors: output shapes and counted FLOPs, or the error the function raised."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    dtype = getattr(torch, TORCH_DTYPES[case["dtype"]])
    try:
        with FakeTensorMode():
            args = {n: torch.empty(shape, dtype=dtype) for n, shape in case["inputs"].items()}
            with FlopCounterMode(display=False) as counter:
                out = fn(**args, **case["params"])
            parts = out if isinstance(out, tuple | list) else (out,)
            outputs = [list(p.shape) for p in parts if isinstance(p, torch.Tensor)]
            found = {"outputs": outputs, "flops": int(counter.get_total_flops())}
            if len(outputs) != len(parts) or not parts:  # runs, but gives nothing to check or count bytes of
                found["not_tensors"] = f"returns {type(out).__name__}, not a tensor or a tuple of tensors"
            return found
    except Exception as exc:  # noqa: BLE001 - the user's code: reported for its case, not raised
        return {"error": f"{type(exc).__name__}: {exc}".strip()[:300]}


def probe(request: dict) -> dict:
    """For each custom entry, in a child process with torch: its output shapes and the FLOPs torch's counter finds (on
    meta tensors), or one sentence of what failed."""
    import torch

    answers = []
    for entry in request["entries"]:
        where = entry["where"]
        try:
            fn = load(entry["function"])
        except UserError as exc:
            return {"error": f"{where}: {exc}"}
        except Exception as exc:  # noqa: BLE001 - importing the user's file ran its code
            return {"error": f"{where}: importing {entry['function']} failed with {type(exc).__name__}: {exc}"}
        try:  # an NKI kernel's module imports `nki`, which only a Neuron machine has: checked where it imports
            nki = load(entry["nki_kernel"]) if entry.get("nki_kernel") else None
        except ImportError:
            nki = None
        except UserError as exc:
            return {"error": f"{where} (nki_kernel): {exc}"}
        problem = _signature_problem(fn, where, entry["input_names"], entry["param_names"])
        if problem:
            return {"error": problem}
        if nki is not None:
            problem = _signature_problem(nki, f"{where} (nki_kernel)", entry["input_names"], entry["param_names"])
            if problem:
                return {"error": problem}
        answers.append([_trace(torch, fn, case) for case in entry["cases"]])
    return {"entries": answers, "torch": torch.__version__}


if __name__ == "__main__":
    raise SystemExit(answer_stdin(probe))
