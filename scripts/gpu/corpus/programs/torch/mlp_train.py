"""Negative: a plain MLP training loop (Linear layers, AdamW) on random data. Memory is flat
after the first step (the optimizer's state); cuBLAS makes its handles and workspaces (on the
main thread and on the autograd engine's thread) and keeps them for the run.

Usage: mlp_train.py STEPS [--amp] [--compile] [--accum N]
  --amp      autocast to float16 with a GradScaler (the usual AMP recipe)
  --compile  torch.compile the model
  --accum N  accumulate gradients over N micro-batches per optimizer step"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("steps", type=int)
ap.add_argument("--amp", action="store_true")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--accum", type=int, default=1)
args = ap.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
run = torch.compile(model) if args.compile else model
losses = []
for step in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    for _ in range(args.accum):
        x = torch.randn(256, 512, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.amp):
            loss = F.cross_entropy(run(x), y) / args.accum
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if step % 50 == 0:
        losses.append(loss.item())
torch.cuda.synchronize()
print(f"{args.steps} steps, loss {losses[0]:.3f} -> {loss.item():.3f}")
