"""nki.isa double: empty; the kernel body never runs under the stand-in."""
