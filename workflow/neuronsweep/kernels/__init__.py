"""NKI kernels (neuron backend only). Imported lazily: `nki` exists only on Neuron machines."""
