"""A training job a scheduler stops (issue 30): started by torchrun with one process under
`gpushim run`, it trains a small model on the GPU and, after 20 steps, writes DIR/started; it then
trains on until it is stopped (at most 120 s). scripts/gpu-matrix.sh then sends SIGTERM to every
process of the job at once, as `scancel`, `systemctl stop` or a pod's teardown do.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=1 stop_check.py DIR
"""

import os
import sys
import time

import torch

out = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
kept = []
start = time.monotonic()
step = 0
while time.monotonic() - start < 120:
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(loss.detach())
    step += 1
    if step == 20:
        torch.cuda.synchronize()
        with open(os.path.join(out, "started"), "w") as f:
            f.write(f"{os.getpid()}\n")
