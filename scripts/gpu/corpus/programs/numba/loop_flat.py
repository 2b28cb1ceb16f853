"""Negative: each step copies a 4 MiB batch to the device, runs a kernel and copies it back;
the device array is dropped (Numba frees it, in batches: its deallocations are deferred).

Usage: loop_flat.py STEPS"""

import sys

import numpy as np

# numba-cuda 0.30 compiles a kernel through `np.row_stack`, which NumPy 2.4 removed (the device
# image has NumPy 2.5): the alias NumPy had for `vstack`, so that the kernels compile there.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda

STEPS = int(sys.argv[1])


@cuda.jit
def scale(a, f):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= f


host = np.random.random(1 << 20).astype(np.float32)
total = 0.0
for _step in range(STEPS):
    d = cuda.to_device(host)
    scale[(d.size + 255) // 256, 256](d, 0.5)
    total += float(d.copy_to_host()[0])
    del d
print("total", total)
