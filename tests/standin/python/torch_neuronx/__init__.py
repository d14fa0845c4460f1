"""The XLA-based torch-neuronx double (SDK <= 2.31, maintenance; see tests/standin/README.md): it imports
torch-xla and registers no `neuron` device, as the real one does; tests/standin/python-torchneuron/
holds the TorchNeuron double that shadows it when first on PYTHONPATH."""

import torch_xla  # noqa: F401  (the real package is built on torch-xla)

__version__ = "2.9.0.2.15.32035"
