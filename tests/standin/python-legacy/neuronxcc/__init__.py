"""neuronxcc double (legacy SDK <= 2.27 layout): only the nki submodule."""
