"""Negative: device arrays allocated once (a 64 MiB input and output) and held for the run;
a kernel runs on them 300 times.

Usage: held.py"""

import numpy as np

# numba-cuda 0.30 compiles a kernel through `np.row_stack`, which NumPy 2.4 removed (the device
# image has NumPy 2.5): the alias NumPy had for `vstack`, so that the kernels compile there.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda


@cuda.jit
def axpy(out, a, x):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + out[i]


n = 16 << 20
x = cuda.to_device(np.ones(n, dtype=np.float32))
out = cuda.to_device(np.zeros(n, dtype=np.float32))
for _step in range(300):
    axpy[(n + 255) // 256, 256](out, 0.001, x)
cuda.synchronize()
print("out[0]", out[:1].copy_to_host()[0])
