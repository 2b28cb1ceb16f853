"""Leak: CuPy arrays kept in a module-level list: each step's 4 MiB result is appended "for
the report at the end".

Usage: kept.py fast|slow   (fast: 80 steps back to back; slow: 60 ms apart)"""

import sys
import time

import cupy as cp

SLOW = sys.argv[1] == "slow"
kept = []
base = cp.random.random((1024, 1024), dtype=cp.float32)
for step in range(80):
    result = cp.tanh(base * (step + 1))  # @leak
    kept.append(result)
    if SLOW:
        time.sleep(0.06)
cp.cuda.Device().synchronize()
print("kept", len(kept))
