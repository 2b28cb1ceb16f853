"""Leak: mixed precision (autocast to bfloat16) inference that keeps each step's logits in a
list; run with PyTorch's cudaMallocAsync backend. Each step keeps a 4 MiB bfloat16 tensor.

Usage: amp_preds.py fast|slow   (fast: 80 steps back to back; slow: 80 steps 60 ms apart)"""

import sys
import time

import torch
from torch import nn

SLOW = sys.argv[1] == "slow"
STEPS = 80


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(512, 512)
        self.head = nn.Linear(512, 8192)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.body(x))
        return self.head(h)  # @leak


model = Tagger().cuda().eval()
all_logits = []
with torch.inference_mode():
    for _step in range(STEPS):
        x = torch.randn(256, 512, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            all_logits.append(model(x))
        if SLOW:
            time.sleep(0.06)
torch.cuda.synchronize()
print("kept", len(all_logits), "logits", all_logits[0].dtype)
