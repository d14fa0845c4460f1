"""How this folder was made (torch-xla 2.9.0, PJRT CPU, 2026-11-28): a Linear, a GELU, a LayerNorm and a softmax
run on the XLA device with autograd off, the optimized HLO module dumped with XLA_HLO_DEBUG=1, then 3
executions traced with torch-xla's profiler. Run in torch-xla's venv; copy the dump's
*cpu_after_optimizations.txt and plugins/profile/<run>/*.trace.json.gz here."""

import os

os.environ.update(PJRT_DEVICE="CPU", XLA_FLAGS="--xla_dump_to=/tmp/xdump", XLA_IR_DEBUG="1", XLA_HLO_DEBUG="1")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.profiler as xp  # noqa: E402

torch.set_grad_enabled(False)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.act, self.norm = torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.LayerNorm(512)

    def forward(self, x):
        return self.norm(self.act(self.proj(x))) + torch.softmax(x, -1)


device = torch_xla.device()
module, x = Block().to(device), torch.randn(256, 512).to(device)
xm.mark_step()
for _ in range(2):
    module(x)
    xm.mark_step()
    xm.wait_device_ops()
xp.start_trace("/tmp/xtrace")
for _ in range(3):
    module(x)
    xm.mark_step()
    xm.wait_device_ops()
xp.stop_trace()
