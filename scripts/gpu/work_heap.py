"""A program with a large host heap: GIB GiB of Python-owned host memory (bytearrays of 1 MiB
and a list of small objects holding them), one CUDA tensor kept live, then exit. Prints
CLOCK_MONOTONIC (ns) as its last act, for scripts/gpu/perf_suite.py (the exit's time).

Usage: python3 work_heap.py [GIB=4]
"""

import sys
import time

import torch

gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
blocks = [bytearray(b"x" * (1 << 20)) for _ in range(int(gib * 1024))]
index = {i: (b, [i] * 8) for i, b in enumerate(blocks)}
torch.cuda.synchronize()
print(f"heap {len(blocks)} MiB, {len(index)} entries")
print(time.monotonic_ns(), flush=True)
