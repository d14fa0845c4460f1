"""torch_xla.distributed.xla_backend double: registers the "xla" process group (as torch-xla does) and
the xla:// rendezvous. Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT) the group is gloo on the
CPU, so the stand-in's collectives exchange real data between the rank processes."""

import sys

import torch.distributed as dist

rendezvous = sys.modules["torch.distributed.rendezvous"]  # the module (the package exports a function too)


def _xla_rendezvous(url, timeout=None, **kwargs):
    if "RANK" not in __import__("os").environ:
        raise RuntimeError("stand-in: xla:// needs torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    return rendezvous._env_rendezvous_handler("env://", **({"timeout": timeout} if timeout else {}))


if "xla" not in rendezvous._rendezvous_handlers:
    rendezvous.register_rendezvous_handler("xla", _xla_rendezvous)
if not hasattr(dist.Backend, "XLA"):
    dist.Backend.register_backend(
        "xla", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout), devices=["cpu"]
    )
