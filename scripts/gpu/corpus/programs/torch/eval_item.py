"""Negative: an evaluation loop without no_grad (a common omission) that keeps only
`loss.item()`: each step's graph is freed when the next step rebinds its names, so memory is
flat.

Usage: eval_item.py STEPS"""

import sys

import torch
import torch.nn.functional as F
from torch import nn

STEPS = int(sys.argv[1])
model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda().eval()
total = 0.0
for _step in range(STEPS):
    x = torch.randn(512, 64, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    loss = F.cross_entropy(model(x), y)
    total += loss.item()
print("mean loss", total / STEPS)
