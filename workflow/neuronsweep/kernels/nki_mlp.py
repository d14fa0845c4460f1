"""Gated MLP as one NKI kernel, outT[H,T] = (W_down^T · (silu(W_gate^T·xT) * (W_up^T·xT))), T = b*s tokens.

Layout chosen so no transpose is needed: every matmul contracts over the partition dim. With xT
[H, T] moving and a weight tile [128, 128] stationary, gate^T and up^T come out [I, T] with I on the
partitions, which is exactly the moving layout the down projection needs; the output is outT [H, T].
The intermediate hT lives in SBUF as [128, (I/128)·tn] (I-tile i at columns i·tn: the language has
no block dimensions any more). Two spellings, as nki_matmul: destination passing for standalone
`nki`, return style for the legacy neuronxcc.nki; the stand-in executes the first on numpy, and on a
device the build checks the output against NumPy (`correctness` in build.json).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neuronsweep.kernels.nki_matmul import device_loop, load_nki
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.mlp import GatedMlp

ARG_NAMES = ("xT", "w_gate", "w_up", "w_down")
P, TN_MAX = 128, 512
SBUF_PARTITION_BYTES = 192 * 1024  # NeuronCore-v2: 24 MiB over 128 partitions (trainium_inferentia2_arch.rst)


def make_kernel(decorate: Callable | None = None) -> Callable:
    """The SwiGLU MLP kernel in the installed NKI's spelling, put under `decorate` (nki.jit by default)."""
    nki, nl, nisa, api = load_nki()
    on_device = api == "nki" and device_loop()  # the token-tile loop on the device (nki_matmul.device_loop)
    loop = range if on_device else nl.affine_range

    def nki_gated_mlp(xT, w_gate, w_up, w_down):
        H, T = xT.shape
        I = w_gate.shape[1]  # noqa: E741
        outT = nl.ndarray((H, T), dtype=xT.dtype, buffer=nl.shared_hbm)
        tn = min(T, TN_MAX)
        # the token tile t: a device value in the device loop, only ever a scalar_offset (blocks of tn)
        x_tiles = xT.reshape((H, T // tn, tn)) if on_device else None
        out_tiles = outT.reshape((H, T // tn, tn)) if on_device else None

        def tokens(tensor, tiles, row, t):  # tensor[row : row+P, t*tn : (t+1)*tn]
            if on_device:
                return tiles.ap(pattern=[[T, P], [1, tn]], offset=row * T, scalar_offset=t, indirect_dim=1)
            return tensor[row : row + P, t * tn : (t + 1) * tn]

        def token_tile(t) -> None:
            hT = nl.ndarray((P, (I // P) * tn), dtype=xT.dtype, buffer=nl.sbuf)
            for i in loop(I // P):
                gate = nl.ndarray((P, tn), dtype=nl.float32, buffer=nl.psum)
                up = nl.ndarray((P, tn), dtype=nl.float32, buffer=nl.psum)  # h=0 overwrites (nki_matmul)
                for h in loop(H // P):
                    x_tile = nl.ndarray((P, tn), dtype=xT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=x_tile, src=tokens(xT, x_tiles, h * P, t))
                    wg = nl.ndarray((P, P), dtype=w_gate.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=wg, src=w_gate[h * P : (h + 1) * P, i * P : (i + 1) * P])
                    wu = nl.ndarray((P, P), dtype=w_up.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=wu, src=w_up[h * P : (h + 1) * P, i * P : (i + 1) * P])
                    add = h > 0 if on_device else None  # as nki_matmul: explicit in the device loop's body
                    nisa.nc_matmul(dst=gate, stationary=wg, moving=x_tile, accumulate=add)
                    nisa.nc_matmul(dst=up, stationary=wu, moving=x_tile, accumulate=add)
                act = nl.ndarray((P, tn), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=act, op=nl.silu, data=gate)
                nisa.tensor_tensor(dst=hT[:, i * tn : (i + 1) * tn], data1=act, data2=up, op=nl.multiply)
            for m in loop(H // P):
                acc = nl.ndarray((P, tn), dtype=nl.float32, buffer=nl.psum)
                for i in loop(I // P):
                    wd = nl.ndarray((P, P), dtype=w_down.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=wd, src=w_down[i * P : (i + 1) * P, m * P : (m + 1) * P])
                    add = i > 0 if on_device else None
                    nisa.nc_matmul(dst=acc, stationary=wd, moving=hT[:, i * tn : (i + 1) * tn], accumulate=add)
                out = nl.ndarray((P, tn), dtype=xT.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=out, src=acc)
                nisa.dma_copy(dst=tokens(outT, out_tiles, m * P, t), src=out)

        if on_device:
            nl.fori_loop(0, T // tn, token_tile)
        else:
            for t in loop(T // tn):
                token_tile(t)
        return outT

    def nki_gated_mlp_legacy(xT, w_gate, w_up, w_down):
        H, T = xT.shape
        I = w_gate.shape[1]  # noqa: E741
        outT = nl.ndarray((H, T), dtype=xT.dtype, buffer=nl.shared_hbm)
        tn = min(T, TN_MAX)
        for t in nl.affine_range(T // tn):
            hT = nl.ndarray((I // P, nl.par_dim(P), tn), dtype=xT.dtype, buffer=nl.sbuf)
            for i in nl.affine_range(I // P):
                gate = nl.zeros((P, tn), nl.float32, buffer=nl.psum)
                up = nl.zeros((P, tn), nl.float32, buffer=nl.psum)
                for h in nl.affine_range(H // P):
                    x_tile = nl.load(xT[h * P : (h + 1) * P, t * tn : (t + 1) * tn])
                    gate += nisa.nc_matmul(nl.load(w_gate[h * P : (h + 1) * P, i * P : (i + 1) * P]), x_tile)
                    up += nisa.nc_matmul(nl.load(w_up[h * P : (h + 1) * P, i * P : (i + 1) * P]), x_tile)
                hT[i] = nl.multiply(nl.silu(gate), up, dtype=xT.dtype)
            for m in nl.affine_range(H // P):
                acc = nl.zeros((P, tn), nl.float32, buffer=nl.psum)
                for i in nl.affine_range(I // P):
                    acc += nisa.nc_matmul(nl.load(w_down[i * P : (i + 1) * P, m * P : (m + 1) * P]), hT[i])
                nl.store(outT[m * P : (m + 1) * P, t * tn : (t + 1) * tn], value=nl.copy(acc, dtype=outT.dtype))
        return outT

    return (decorate or nki.jit)(nki_gated_mlp if api == "nki" else nki_gated_mlp_legacy)


def unrolled(g: GatedMlp, on_device: bool = False) -> int:
    """nc_matmul instructions the traced kernel holds: gate and up per (token tile, I tile, H tile), down
    per (token tile, H tile, I tile); one token tile when that loop is on the device."""
    t, h, i = g.tokens, g.h, g.i
    tiles = 1 if on_device else max(1, t // TN_MAX)
    return tiles * (2 * (i // P) * (h // P) + (h // P) * (i // P))


def body_bytes(g: GatedMlp) -> dict[str, int]:
    """Bytes per partition one body of the device loop (one token tile) keeps live at its peak, counted as
    nki_matmul.body_bytes counts them: SBUF, the intermediate hT, the x and weight tiles of two H steps, the
    activations of two I steps, the down weights of two steps and two output tiles; PSUM, gate and up of
    two I steps and the accumulators of two H steps."""
    t, h, i = g.tokens, g.h, g.i
    tn, b = min(t, TN_MAX), DTYPE_BYTES[g.dtype]
    del h  # the body's peak does not grow with H: its tiles are replaced step by step
    sbuf = (i // P) * tn * b + 2 * (tn + 2 * P) * b + 2 * tn * 4 + 2 * P * b + 2 * tn * b
    return {"sbuf": sbuf, "psum": (2 * 2 + 2) * tn * 4}


def supported(g: GatedMlp, on_device: bool = False) -> str | None:
    """Why this one-pass kernel cannot tile the case (its dims; without a device loop, an intermediate past
    half an SBUF partition of NeuronCore-v2: the compiler schedules the unrolled tiles around it), or None.
    With a device loop (NKI 0.6+) the intermediate is part of the body, bounded whole by the target's
    partition (body_bytes, kernels/__init__.py)."""
    t, h, i = g.tokens, g.h, g.i
    problems = [f"{name}={v} is not a multiple of 128" for name, v in (("h", h), ("i", i)) if v % P]
    if t > TN_MAX and t % TN_MAX:
        problems.append(f"b*s={t} is not a multiple of 512 (or at most 512)")
    h_bytes = (i // P) * min(t, TN_MAX) * DTYPE_BYTES[g.dtype]
    if not on_device and h_bytes > SBUF_PARTITION_BYTES // 2:
        problems.append(
            f"the intermediate takes {h_bytes} B of each SBUF partition, over half of its "
            f"{SBUF_PARTITION_BYTES} (i too large for this one-pass kernel)"
        )
    return "; ".join(problems) or None


def inputs(g: GatedMlp, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The kernel's inputs by argument name, float32, the weights scaled so the activations stay near 1."""
    t, h, i = g.tokens, g.h, g.i
    scale_h, scale_i = float(h) ** -0.5, float(i) ** -0.5  # python floats keep the arrays float32
    return {
        "xT": rng.standard_normal((h, t), dtype=np.float32),
        "w_gate": rng.standard_normal((h, i), dtype=np.float32) * scale_h,
        "w_up": rng.standard_normal((h, i), dtype=np.float32) * scale_h,
        "w_down": rng.standard_normal((i, h), dtype=np.float32) * scale_i,
    }


def reference(a: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 result the kernel's output is checked against (transposed, as the kernel writes it)."""
    x = a["xT"].astype(np.float64).T
    gate, up = x @ a["w_gate"].astype(np.float64), x @ a["w_up"].astype(np.float64)
    return ((gate / (1 + np.exp(-gate)) * up) @ a["w_down"].astype(np.float64)).T


def workload_view(a: dict[str, np.ndarray], out: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The kernel's inputs and output as the mlp workload names them (x = xT^T, out = outT^T)."""
    return {"x": a["xT"].T, "w_gate": a["w_gate"], "w_up": a["w_up"], "w_down": a["w_down"]}, np.asarray(out).T
