"""Leak: features are kept in a dict keyed by the step ("for the end-of-epoch analysis"), one
4 MiB tensor a step. Run with expandable segments.

Usage: step_dict.py fast|slow   (fast: 60 steps back to back; slow: 80 ms apart)"""

import sys
import time

import torch
import torch.nn.functional as F

SLOW = sys.argv[1] == "slow"
W = torch.randn(256, 2048, device="cuda")
features = {}
with torch.no_grad():
    for step in range(60):
        x = torch.randn(512, 256, device="cuda")
        emb = F.normalize(x @ W, dim=1)  # @leak
        features[step] = emb
        if SLOW:
            time.sleep(0.08)
torch.cuda.synchronize()
print("kept", len(features))
