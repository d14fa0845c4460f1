"""Write the real torch.profiler traces of this folder (torch 2.13.0 CPU): `python make_traces.py`."""

import torch
from torch.profiler import ProfilerActivity, profile, record_function

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
x = torch.randn(16, 64)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as p:
    with record_function("step"):
        model(x).sum().backward()
p.export_chrome_trace("eager_backward.json")

compiled = torch.compile(lambda a: torch.nn.functional.gelu(a @ a.T).sum(), backend="eager")
compiled(x)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
    compiled(x)
p.export_chrome_trace("compiled_threads.json.gz")  # gzipped by torch.profiler because of the name
