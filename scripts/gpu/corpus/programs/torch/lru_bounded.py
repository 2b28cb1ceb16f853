"""Negative: a bounded `functools.lru_cache(maxsize=8)` returning 4 MiB GPU tensors, asked for
100 different keys: it never holds more than 8, older entries are evicted and freed.

Usage: lru_bounded.py"""

import functools

import torch

inv_freq = 1.0 / (10000 ** (torch.arange(0, 512, 2, device="cuda").float() / 512))


@functools.lru_cache(maxsize=8)
def rope_table(seq_len):
    pos = torch.arange(seq_len, device="cuda", dtype=torch.float32)
    return torch.outer(pos, inv_freq)


total = 0
for step in range(100):
    total += rope_table(4096 + step).shape[0]
torch.cuda.synchronize()
print("cached", rope_table.cache_info().currsize, total)
