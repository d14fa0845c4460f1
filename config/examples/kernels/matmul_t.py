"""An example pair for suites.custom (config/examples/custom.yaml): `matmul_t` is the computation in PyTorch,
the reference every implementation is checked against, and matmul_t_nki.py is an NKI kernel of the same
computation. Both take the left operand transposed (lhsT [K, M]), the layout TensorE contracts over, and the
same tile-size param; the PyTorch function has no use for it but must accept it, since params are passed
to every implementation."""

import torch


def matmul_t(lhsT: torch.Tensor, rhs: torch.Tensor, tile_n: int = 512) -> torch.Tensor:
    """lhsT.T @ rhs: [M, N] from lhsT [K, M] and rhs [K, N]; tile_n is the NKI kernel's, unused here."""
    return lhsT.T @ rhs
