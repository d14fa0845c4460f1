"""neuronxcc.nki.language double: empty."""
