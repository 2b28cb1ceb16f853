"""Negative: PyTorch's caching allocator keeps freed memory. Large temporaries (512 MiB, then
two of 256 MiB, then repeats) are made and dropped; the pool keeps its segments for reuse and
the program never calls empty_cache().

Usage: pool_keeps.py"""

import torch

MIB = 1 << 20
for rnd in range(20):
    a = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")
    a.fill_(rnd)
    del a
    b = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    c = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    del b, c
torch.cuda.synchronize()
print("reserved", torch.cuda.memory_reserved() // MIB, "MiB, allocated", torch.cuda.memory_allocated())
