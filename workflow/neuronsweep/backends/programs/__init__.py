"""The programs a backend starts in a child process (`python -m neuronsweep.backends.programs.<name>`, or
one per rank under torchrun): their environment (PJRT_DEVICE, NEURON_*, the NKI import, a rank's core)
is read once at import, so each runs in a fresh interpreter. The parent side of each (its `run`) sits
beside its `main`, so that one module holds both ends of its command line."""
