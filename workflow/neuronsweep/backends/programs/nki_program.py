"""The NKI side of a neuron build, run in a child process (NKI_ARTIFACTS_DIR must be set before
`nki` is imported).

standalone nki (>= 0.2, SDK 2.28+): call the @nki.jit kernel twice on the same inputs; each compile
  writes kernel.neff under NKI_ARTIFACTS_DIR, which the compiler wants empty. The first NEFF is moved
  out (to nki/kernel.neff) so the folder is empty again before the second call: a NEFF that appears
  there was written by a second compile, so the kernel recompiles on every call (the @nki.jit trap,
  diagnosed by hand on trn2: 4 s "latency" that was all compilation). A file's mtime is not asked:
  a cache hit may touch it and a fast recompile may not change it.
legacy neuronxcc.nki (SDK <= 2.27): nki.benchmark(save_neff_name=...) writes the NEFF and gives
  neuron-bench latency percentiles.
Inputs are saved under the kernel's argument names (.npy; raw .bin for bf16, which .npy cannot
hold) so `capture` can feed them to the NEFF by name. A user's kernel (suites.custom) gets its params as
keywords and is checked against the user's PyTorch function (kernels/custom_nki.py); it needs the
standalone nki.
    python -m neuronsweep.backends.programs.nki_program --spec JSON --out result.json --inputs-dir DIR
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from neuronsweep.analysis.correctness import check
from neuronsweep.backends.processes import fresh
from neuronsweep.errors import UserError
from neuronsweep.kernels import custom_nki, for_spec, launch
from neuronsweep.kernels import inputs as kernel_inputs
from neuronsweep.kernels.nki_matmul import load_nki, loops
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described, dtype_of

if TYPE_CHECKING:
    import numpy as np


def _inputs(spec: Spec, names: list[str], inputs_dir: Path) -> tuple[dict[str, np.ndarray], list[list[str]]]:
    import numpy as np

    arrays = kernel_inputs(spec, np.random.default_rng(0))
    if dtype_of(spec) == "fp16":
        arrays = {name: a.astype(np.float16) for name, a in arrays.items()}
    elif dtype_of(spec) == "bf16":
        import ml_dtypes  # ships with the Neuron SDK's jax/nki stacks

        arrays = {name: a.astype(ml_dtypes.bfloat16) for name, a in arrays.items()}
    inputs_dir.mkdir(parents=True, exist_ok=True)
    saved = []
    for name in names:
        if dtype_of(spec) == "bf16":
            path = inputs_dir / f"{name}.bin"
            arrays[name].tofile(path)
        else:
            path = inputs_dir / f"{name}.npy"
            np.save(path, arrays[name])
        saved.append([name, str(path)])
    return arrays, saved


def _neffs(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "**", "*.neff"), recursive=True))


def _jit_twice(kernel: Callable, args_in: list, keywords: dict, root: Path, keep: Path) -> tuple[dict, object]:
    """Call the kernel twice, the artifacts folder emptied before each call; the first compile's NEFF
    is kept at `keep`. Returns (build facts, the output of the first call)."""
    fresh(root)
    t0 = time.perf_counter()
    out = kernel(*args_in, **keywords)
    first_s = time.perf_counter() - t0
    written = _neffs(str(root))
    if len(written) != 1:
        return {"neffs": written, "calls": [first_s]}, out
    keep.unlink(missing_ok=True)
    shutil.move(written[0], keep)
    fresh(root)
    t0 = time.perf_counter()
    kernel(*args_in, **keywords)
    second_s = time.perf_counter() - t0
    recompiled = bool(_neffs(str(root)))
    facts = {
        "neffs": [str(keep)],
        "calls": [first_s, second_s],
        "recompiled_on_second_call": recompiled,
        "compile_s": None if recompiled else first_s - second_s,
        "compile_s_source": "recompiled on every call: compile and run cannot be separated"
        if recompiled
        else "first call minus second (cached) call, wall clock",
    }
    return facts, out


def main(argv: list[str] | None = None) -> int:
    """Build (and with --iterations, time) one NKI kernel for the spec in this fresh process; writes the result JSON
    given by --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--inputs-dir", required=True)
    args = ap.parse_args(argv)
    spec = json.loads(args.spec)

    try:
        nki, _, _, api = load_nki()
    except UserError as exc:  # neither nki nor neuronxcc.nki: one sentence, as the stage reports a child's last line
        raise SystemExit(f"neuronsweep: {exc}") from None
    if api != "nki" and described(spec).user_code:
        raise SystemExit(f"neuronsweep: {custom_nki.LEGACY_WHY}; install the SDK's nki package.")
    root = os.environ["NKI_ARTIFACTS_DIR"]  # the legacy route writes its NEFF there too
    neff = str(Path(root) / "kernel.neff")
    how = launch(spec, None if api == "nki" else nki.benchmark(warmup=2, iters=10, save_neff_name=neff))
    arrays, saved = _inputs(spec, how.arg_names, Path(args.inputs_dir))
    args_in = [arrays[name] for name in how.arg_names]
    result: dict[str, object] = {
        "api": api,
        "inputs": saved,
        "loops": None if described(spec).user_code else loops(api),
    }
    if api == "nki":
        keep = Path(root).parent / "kernel.neff"
        facts, out = _jit_twice(how.kernel, args_in, how.keywords, Path(root), keep)
        result.update(facts)
    else:
        bench = how.kernel
        t0 = time.perf_counter()
        bench(*args_in)
        latency = bench.benchmark_result.nc_latency
        result.update(
            neffs=[neff],
            calls=[time.perf_counter() - t0],
            recompiled_on_second_call=None,
            compile_s=None,
            compile_s_source="nki.benchmark compiles and runs in one call",
            benchmark_us={f"p{p}": latency.get_latency_percentile(p) for p in (0, 50, 90, 99, 100)},
        )
    if api == "nki":  # nki.jit ran the kernel on these very inputs: its output can be checked
        result["correctness"] = check(spec, *for_spec(spec).workload_view(arrays, out))
    else:
        result["correctness"] = {
            "correct": None,
            "correct_why": "nki.benchmark runs the kernel on inputs of its own (its output is "
            "undefined), so its output cannot be checked on this route",
        }
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
