"""Leak: Numba device arrays kept in a module-level list: each step copies a 4 MiB host batch to
the device and keeps the device array.

Usage: kept.py fast|slow   (fast: 60 steps back to back; slow: 80 ms apart)"""

import sys
import time

import numpy as np

# numba-cuda 0.30 compiles a kernel through `np.row_stack`, which NumPy 2.4 removed (the device
# image has NumPy 2.5): the alias NumPy had for `vstack`, so that the kernels compile there.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda

SLOW = sys.argv[1] == "slow"


@cuda.jit
def scale(a, f):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= f


host = np.random.random(1 << 20).astype(np.float32)
kept = []
for step in range(60):
    d = cuda.to_device(host)  # @leak
    scale[(d.size + 255) // 256, 256](d, float(step + 1))
    kept.append(d)
    if SLOW:
        time.sleep(0.08)
cuda.synchronize()
print("kept", len(kept))
