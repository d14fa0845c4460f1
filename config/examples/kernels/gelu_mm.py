"""An example of your own PyTorch function for suites.custom (config/examples/custom.yaml): a GEMM followed
by GELU and a scale. neuron-sweep calls it with the inputs by name and the params as keywords."""

import torch


def gelu_mm(x: torch.Tensor, w: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """GELU(x @ w) * alpha."""
    return torch.nn.functional.gelu(x @ w) * alpha


def blocked_mm(a: torch.Tensor, b: torch.Tensor, block: int = 64) -> torch.Tensor:
    """The same product computed block by block along K: a tile-size param to sweep."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for k in range(0, a.shape[1], block):
        out = out + a[:, k : k + block] @ b[k : k + block, :]
    return out
