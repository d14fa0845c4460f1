"""Standalone `nki` (>= 0.2) double for tests: @nki.jit "compiles" on the first call with new input
shapes, writing NKI_ARTIFACTS_DIR/kernel.neff (the directory is read at import, as the real package
requires), then executes the kernel body on numpy through the nki.language / nki.isa doubles (real
signatures, memory rules enforced) and returns its output, so the build's max_abs_error_vs_numpy
checks the kernel's arithmetic. STANDIN_NKI_RECOMPILE=1 recompiles on every call (the @nki.jit trap).
A compile into a non-empty NKI_ARTIFACTS_DIR fails, as neuronx-cc refuses a used output folder.

Before NKI 0.7 a kernel launches at LNC 1 unless called as `kernel[lnc](...)` (the nki.jit docstring,
NKI "About LNC"); from 0.7 (the 2.33.1 nki.jit page) a plain call launches at NEURON_LOGICAL_NC_CONFIG
(default 1), and the `kernel[lnc](...)` form warns, "being deprecated" (error page NCC_EVRF066). The
launch must match the runtime's NEURON_LOGICAL_NC_CONFIG (default: the machine's, 2 on the trn2
stand-in) or the call fails as the runtime does; the NEFF records the launch's LNC."""

import enum
import inspect
import json
import os
from pathlib import Path

import numpy as np
import standin_cores

_ARTIFACTS = os.environ.get("NKI_ARTIFACTS_DIR")


def jit(fn):
    compiled = set()

    def launch(grid, arrays, keywords):
        # tensors positionally, meta-parameters (tile sizes) as Python keywords, as the NKI tutorials call
        # nki_matmul_fully_optimized_(lhsT, rhs, TILES_IN_BLOCK_M=16); the language guide's keyword kinds are
        # scalars, enums and instances of the kernel author's classes. The docs show no tensor by keyword and no
        # container (list, dict), so the stand-in refuses those
        for key, value in keywords.items():
            own_class = type(value).__module__ not in ("builtins", "numpy")
            if not (isinstance(value, (bool, int, float, str, enum.Enum)) or own_class):
                raise TypeError(
                    f"stand-in nki: keyword {key}={type(value).__name__} of {fn.__name__}; pass tensors "
                    "positionally and only scalars, enums or instances of your classes as keywords"
                )
        if not all(isinstance(a, np.ndarray) for a in arrays):
            raise TypeError(f"stand-in nki: {fn.__name__}'s positional arguments must be np.ndarray (standalone run)")
        if grid != standin_cores.process_lnc():
            raise RuntimeError(
                f"NRT: kernel {fn.__name__} was launched at LNC {grid} but the runtime runs "
                f"NEURON_LOGICAL_NC_CONFIG={standin_cores.process_lnc()}: launch it as "
                f"{fn.__name__}[{standin_cores.process_lnc()}](...) or set NEURON_LOGICAL_NC_CONFIG={grid}"
            )
        if _ARTIFACTS is None:
            raise RuntimeError("stand-in nki: NKI_ARTIFACTS_DIR was not set before `import nki`")
        signature = (fn.__name__, tuple(a.shape for a in arrays), str(arrays[0].dtype), tuple(sorted(keywords.items())))
        matmul = len(arrays) == 2  # lhsT [K,M], rhs [K,N]: its FLOPs go into the NEFF header for the profiler
        if signature not in compiled or os.environ.get("STANDIN_NKI_RECOMPILE") == "1":
            ops = (
                [["matmul", [[a.shape[1], a.shape[0]], list(arrays[1].shape)]] for a in arrays[:1]]
                if matmul
                else [["kernel", [list(a.shape) for a in arrays]]]
            )
            header = {
                "graph": fn.__name__,
                "ops": ops,
                "target": os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE"),
                "lnc": grid,
                "input_names": list(inspect.signature(fn).parameters)[: len(arrays)],  # its tensor arguments
            }
            Path(_ARTIFACTS).mkdir(parents=True, exist_ok=True)
            if any(Path(_ARTIFACTS).iterdir()):  # neuronx-cc refuses to compile into a used folder
                raise RuntimeError(
                    f"ERROR: the compile output directory {_ARTIFACTS} is not empty; remove its contents "
                    "or choose another NKI_ARTIFACTS_DIR"
                )
            (Path(_ARTIFACTS) / "kernel.neff").write_bytes(b"NEFF\0" + json.dumps(header).encode())
            compiled.add(signature)
        from . import language

        language.DEPRECATED_CALLS.clear()
        language.DEVICE_LOOPS.clear()
        language.DEVICE_LOOP_BYTES.clear()
        out = fn(*(language.tensor(a, language.hbm) for a in arrays), **keywords)
        neff = Path(_ARTIFACTS) / "kernel.neff"
        if (language.DEPRECATED_CALLS or language.DEVICE_LOOPS) and neff.is_file():  # what the trace used, for tests
            header = json.loads(neff.read_bytes()[5:])
            if language.DEPRECATED_CALLS:
                header["deprecated_calls"] = sorted(set(language.DEPRECATED_CALLS))
            if language.DEVICE_LOOPS:
                header["device_loops"] = list(language.DEVICE_LOOPS)
                header["device_loop_bytes"] = list(language.DEVICE_LOOP_BYTES)  # each body's peak per partition
            neff.write_bytes(b"NEFF\0" + json.dumps(header).encode())
        return np.asarray(out)

    from .language import _version

    class Kernel:
        __name__ = fn.__name__

        def __call__(self, *arrays, **keywords):
            by_variable = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1")) if _version() >= (0, 7) else 1
            return launch(by_variable, arrays, keywords)

        def __getitem__(self, grid):
            if _version() >= (0, 7):
                import warnings

                warnings.warn(
                    f"{fn.__name__}[{grid}](...): launching with an LNC grid is being deprecated (NCC_EVRF066); "
                    "set NEURON_LOGICAL_NC_CONFIG",
                    DeprecationWarning,
                    stacklevel=2,
                )
            return lambda *arrays, **keywords: launch(int(grid), arrays, keywords)

    return Kernel()
