"""Leak: an unbounded `functools.lru_cache` returns GPU tensors: a rotary-embedding table per
sequence length, and every batch has a new length. Each entry is 4 MiB.

Usage: lru_unbounded.py fast|slow   (fast: 60 lengths back to back; slow: 80 ms apart)"""

import functools
import sys
import time

import torch

SLOW = sys.argv[1] == "slow"
inv_freq = 1.0 / (10000 ** (torch.arange(0, 512, 2, device="cuda").float() / 512))


@functools.lru_cache(maxsize=None)  # noqa: UP033 (as the field writes it)
def rope_table(seq_len):
    pos = torch.arange(seq_len, device="cuda", dtype=torch.float32)
    return torch.outer(pos, inv_freq)  # @leak


total = 0
for step in range(60):
    table = rope_table(4096 + step)
    total += table.shape[0]
    if SLOW:
        time.sleep(0.08)
torch.cuda.synchronize()
print("tables", rope_table.cache_info().currsize, total)
