"""Negative: the last 10 outputs are kept in a `collections.deque(maxlen=10)` for a moving
average; older ones drop out and are freed.

Usage: deque_bounded.py STEPS"""

import collections
import sys

import torch
from torch import nn

STEPS = int(sys.argv[1])
model = nn.Linear(512, 4096).cuda().eval()
recent = collections.deque(maxlen=10)
with torch.no_grad():
    for _step in range(STEPS):
        recent.append(model(torch.randn(256, 512, device="cuda")))
        smooth = torch.stack(list(recent)).mean(dim=0)
torch.cuda.synchronize()
print(len(recent), float(smooth.abs().mean()))
