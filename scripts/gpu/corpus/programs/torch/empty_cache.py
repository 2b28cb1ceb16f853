"""Negative: one 64 MiB tensor made, used, dropped, then `torch.cuda.empty_cache()`; the program
then idles for a second (the CUDA context stays, but no allocation is live).

Usage: empty_cache.py"""

import time

import torch

x = torch.ones(16 << 20, device="cuda")
print(float(x.sum()))
del x
torch.cuda.empty_cache()
time.sleep(1.0)
print("allocated", torch.cuda.memory_allocated(), "reserved", torch.cuda.memory_reserved())
