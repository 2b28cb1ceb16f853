"""Negative: a textbook CNN training loop (conv layers, SGD with momentum; cuDNN and cuBLAS)
that records each step's loss in a list, as `loss.item()` or as the loss tensor itself after
`backward()`. After backward the kept loss tensor's graph has already freed what it saved, so
only a 4-byte scalar a step is kept, inside a block the allocator already had: no allocation
grows.

Usage: cnn_train.py STEPS item|tensor"""

import sys

import torch
import torch.nn.functional as F
from torch import nn

STEPS = int(sys.argv[1])
KEEP_TENSOR = sys.argv[2] == "tensor"

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 32, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(64, 10),
).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_history = []
model.train()
for _step in range(STEPS):
    data = torch.randn(64, 3, 32, 32, device="cuda")
    target = torch.randint(0, 10, (64,), device="cuda")
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(F.log_softmax(output, dim=1), target)
    loss.backward()
    optimizer.step()
    loss_history.append(loss if KEEP_TENSOR else loss.item())
torch.cuda.synchronize()
print(f"{STEPS} steps, last loss {float(loss_history[-1]):.3f}")
