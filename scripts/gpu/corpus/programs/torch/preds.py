"""Leak: an inference loop under no_grad appends every batch's outputs to a module-level list
(`preds`), meaning to concatenate them later. Each step keeps a 4 MiB output tensor.

Usage: preds.py fast|slow   (fast: 80 steps back to back; slow: 80 steps 60 ms apart)"""

import sys
import time

import torch
from torch import nn

SLOW = sys.argv[1] == "slow"
STEPS = 80


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 4096)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.fc2(h)  # @leak


model = Classifier().cuda().eval()
preds = []
with torch.no_grad():
    for _step in range(STEPS):
        x = torch.randn(256, 256, device="cuda")
        preds.append(model(x))
        if SLOW:
            time.sleep(0.06)
torch.cuda.synchronize()
print("kept", len(preds), "outputs")
