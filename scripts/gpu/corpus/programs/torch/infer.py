"""Negative: no_grad inference with a model whose weights (about 200 MiB) are held for the
run; each batch's predictions go to the host (`.cpu()`), so device memory is flat.

Usage: infer.py STEPS [--compile]"""

import sys

import torch
from torch import nn

STEPS = int(sys.argv[1])
COMPILE = "--compile" in sys.argv[2:]
model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048))])
model = model.cuda().eval()
run = torch.compile(model) if COMPILE else model
predictions = []
with torch.no_grad():
    for _step in range(STEPS):
        x = torch.randn(64, 2048, device="cuda")
        predictions.append(run(x).argmax(dim=1).cpu())
print(len(predictions), "batches")
