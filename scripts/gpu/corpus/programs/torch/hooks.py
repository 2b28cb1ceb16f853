"""Leak: a forward hook is registered on the model every step (instead of once), each a closure
over a 4 MiB probe tensor made for it; the module's hook dict keeps them all.

Usage: hooks.py fast|slow   (fast: 50 steps back to back; slow: 100 ms apart)"""

import sys
import time

import torch
from torch import nn

SLOW = sys.argv[1] == "slow"
model = nn.Linear(256, 256).cuda()


def attach_probe(module):
    probe = torch.zeros(1024, 1024, device="cuda")  # @leak

    def hook(mod, inputs, output):
        assert probe.is_cuda

    module.register_forward_hook(hook)


with torch.no_grad():
    for _step in range(50):
        attach_probe(model)
        out = model(torch.randn(64, 256, device="cuda"))
        if SLOW:
            time.sleep(0.1)
torch.cuda.synchronize()
print("hooks", len(model._forward_hooks))
