"""Issue 29: the shim never adds a torch._inductor or torch._dynamo import to the program. A loop
keeping each step's model output; it prints whether torch._inductor is imported before any
snapshot, after a gpushim snapshot (`SNAP=1`: it sends itself SIGUSR1) and at exit, after the
exit's heap walk (its atexit function runs after the shim's), and writes the same to TRUTH (a
file, default truth.json: the GPU matrix's row `no_import`). `OPT=1` first makes one AdamW step,
which imports them in PyTorch 2.11 by itself.

    SNAP=1 gpushim run -- python3 scripts/gpu/no_import_check.py     (and bare, to compare)
"""

import atexit
import json
import os
import signal
import sys
import time

TRUTH = os.environ.get("TRUTH", "truth.json")
seen = {}


def imported():
    return {"inductor": "torch._inductor" in sys.modules, "dynamo": "torch._dynamo" in sys.modules}


def at_exit():
    seen["at_exit"] = imported()
    print("at exit (after the exit walk):", seen["at_exit"], flush=True)
    with open(TRUTH, "w") as f:
        json.dump({**seen, "model_line": MODEL_LINE}, f)


atexit.register(at_exit)
import torch  # noqa: E402

with open(__file__) as src:
    MODEL_LINE = next(i for i, s in enumerate(src, 1) if s.rstrip().endswith("# the model's line"))
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
kept = []
if os.environ.get("OPT") == "1":
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()
    seen["after_adamw_step"] = imported()
    print("after one AdamW step:", seen["after_adamw_step"], flush=True)
for _ in range(60):
    x = torch.randn(256, 1024, device="cuda")
    y = m(x)  # the model's line
    y.sum().backward()
    kept.append(y.detach())
seen["before_snapshot"] = imported()
print("before any snapshot:", seen["before_snapshot"], flush=True)
if os.environ.get("SNAP") == "1":
    os.kill(os.getpid(), signal.SIGUSR1)
    t = time.time()
    while time.time() - t < 2:
        sum(range(1000))
    seen["after_snapshot"] = imported()
    print("after a snapshot:", seen["after_snapshot"], flush=True)
print("end of program", time.time(), flush=True)
