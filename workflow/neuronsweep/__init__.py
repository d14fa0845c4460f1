"""neuron-sweep: config-driven profiling sweeps for AWS Neuron, with a real CPU backend."""

__version__ = "0.1.0"
