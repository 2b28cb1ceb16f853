"""Issue 29: the shim never adds a torch._inductor or torch._dynamo import to the program. A loop
keeping each step's model output; it prints whether torch._inductor is imported before any
snapshot, after a gpushim snapshot (`SNAP=1`: it sends itself SIGUSR1) and at exit, after the
exit's heap walk (its atexit function runs after the shim's). `OPT=1` first makes one AdamW step,
which imports them in PyTorch 2.11 by itself.

    SNAP=1 gpushim run -- python3 scripts/gpu/no_import_check.py     (and bare, to compare)
"""

import atexit
import os
import signal
import sys
import time

atexit.register(
    lambda: print(
        "at exit (after the exit walk): inductor",
        "torch._inductor" in sys.modules,
        "dynamo",
        "torch._dynamo" in sys.modules,
        flush=True,
    )
)
import torch  # noqa: E402

m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
kept = []
if os.environ.get("OPT") == "1":
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()
    print(
        "after one AdamW step: inductor",
        "torch._inductor" in sys.modules,
        "dynamo",
        "torch._dynamo" in sys.modules,
        flush=True,
    )
for _ in range(60):
    x = torch.randn(256, 1024, device="cuda")
    y = m(x)  # the model's line
    y.sum().backward()
    kept.append(y.detach())
print("before any snapshot: inductor", "torch._inductor" in sys.modules, flush=True)
if os.environ.get("SNAP") == "1":
    os.kill(os.getpid(), signal.SIGUSR1)
    t = time.time()
    while time.time() - t < 2:
        sum(range(1000))
    print("after a snapshot: inductor", "torch._inductor" in sys.modules, flush=True)
print("end of program", time.time(), flush=True)
