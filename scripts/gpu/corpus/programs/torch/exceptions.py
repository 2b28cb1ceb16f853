"""Leak: failed batches' exceptions are kept in a list for a summary at the end; each
exception's traceback keeps the frame that raised it, and with it that frame's 4 MiB tensor.

Usage: exceptions.py fast|slow   (fast: 50 failures back to back; slow: 100 ms apart)"""

import sys
import time

import torch

SLOW = sys.argv[1] == "slow"
errors = []


class BadBatch(Exception):
    pass


def validate(step):
    scores = torch.rand(1024, 1024, device="cuda")  # @leak
    if step >= 0:
        raise BadBatch(f"batch {step}: scores out of range")
    return scores


for step in range(50):
    try:
        validate(step)
    except BadBatch as e:
        errors.append(e)
    if SLOW:
        time.sleep(0.1)
torch.cuda.synchronize()
print("failed batches", len(errors))
