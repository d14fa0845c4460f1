"""Standalone `nki` (>= 0.2) double for tests: @nki.jit "compiles" on the first call with new input
shapes, writing NKI_ARTIFACTS_DIR/kernel.neff (the directory is read at import, as the real package
requires), and returns the numpy result. STANDIN_NKI_RECOMPILE=1 recompiles on every call (the
@nki.jit trap). The kernel body is never executed: this double checks the workflow, not NKI."""

import json
import os
from pathlib import Path

import numpy as np

_ARTIFACTS = os.environ.get("NKI_ARTIFACTS_DIR")


def jit(fn):
    compiled = set()

    def call(*arrays):
        if _ARTIFACTS is None:
            raise RuntimeError("stand-in nki: NKI_ARTIFACTS_DIR was not set before `import nki`")
        lhsT, rhs = arrays
        signature = (fn.__name__, tuple(a.shape for a in arrays), str(lhsT.dtype))
        if signature not in compiled or os.environ.get("STANDIN_NKI_RECOMPILE") == "1":
            (k, m), (_, n) = lhsT.shape, rhs.shape
            header = {"graph": fn.__name__, "ops": [["matmul", [[m, k], [k, n]]]],
                      "target": os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")}
            Path(_ARTIFACTS).mkdir(parents=True, exist_ok=True)
            (Path(_ARTIFACTS) / "kernel.neff").write_bytes(b"NEFF\0" + json.dumps(header).encode())
            compiled.add(signature)
        return lhsT.astype(np.float32).T @ rhs.astype(np.float32)

    call.__name__ = fn.__name__
    return call
