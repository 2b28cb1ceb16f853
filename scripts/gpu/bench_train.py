"""A small transformer training loop for scripts/bench-gpu.sh: prints steps per second.

Usage: python3 bench_train.py STEPS [--history]   (--history: torch.cuda.memory._record_memory_history(stacks="all"))
"""

import sys
import time

import torch

steps = int(sys.argv[1])
torch.manual_seed(0)
if "--history" in sys.argv:
    torch.cuda.memory._record_memory_history(stacks="all")
layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=4).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, 256, 512, device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()


for _ in range(20):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
print(f"{steps / (time.perf_counter() - t0):.3f}")
