"""neuronxcc.nki.isa double: empty."""
