"""The NeuronCore's engines as the profile names them: the compute engines a bottleneck can be (beside the
DMA) and the sync engine, which the summary counts but no bound rests on. One tuple, read by the summary's
counters, the bounds ladder and its windows."""

from __future__ import annotations

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
ENGINES = (*COMPUTE_ENGINES, "sync")
