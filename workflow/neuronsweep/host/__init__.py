"""The machine: host capabilities, Neuron devices and their slots, device locks, the target table."""
