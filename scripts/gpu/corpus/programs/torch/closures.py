"""Leak: callbacks registered in a module-level dict, each a closure over a 4 MiB tensor made
for it, and never unregistered.

Usage: closures.py fast|slow   (fast: 50 registrations back to back; slow: 100 ms apart)"""

import sys
import time

import torch

SLOW = sys.argv[1] == "slow"
_CALLBACKS = {}


def make_callback(step):
    noise = torch.randn(1024, 1024, device="cuda")  # @leak

    def callback(x):
        return x + noise * step

    return callback


def register(name, fn):
    _CALLBACKS[name] = fn


for step in range(50):
    register(f"augment-{step}", make_callback(step))
    if SLOW:
        time.sleep(0.1)
torch.cuda.synchronize()
print("registered", len(_CALLBACKS))
