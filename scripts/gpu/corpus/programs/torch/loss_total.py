"""Leak: an evaluation loop without no_grad adds each batch's loss tensor to a running total
(`total_loss += loss` instead of `loss.item()`). The total's autograd graph keeps every step's
saved activations: the hidden layer's output, 8 MiB a step.

Usage: loss_total.py fast|slow   (fast: 60 steps back to back; slow: 60 steps 80 ms apart)"""

import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

SLOW = sys.argv[1] == "slow"
STEPS = 60


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 4096)
        self.fc2 = nn.Linear(4096, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))  # @leak


model = Scorer().cuda()
model.eval()
total_loss = 0.0
for _step in range(STEPS):
    x = torch.randn(512, 64, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    loss = F.cross_entropy(model(x), y)
    total_loss += loss
    if SLOW:
        time.sleep(0.08)
print("mean loss", float(total_loss) / STEPS)
