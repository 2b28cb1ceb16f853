"""Negative: an elementwise CuPy loop on 4 MiB arrays whose temporaries go back to the pool
each step; weights (a 64 MiB matrix) are held for the run and used with cuBLAS.

Usage: loop_flat.py STEPS"""

import sys

import cupy as cp

STEPS = int(sys.argv[1])
W = cp.random.random((4096, 4096), dtype=cp.float32)
x = cp.random.random((256, 4096), dtype=cp.float32)
acc = 0.0
for step in range(STEPS):
    y = cp.tanh(x @ W) * 0.5 + 0.1
    x = y / (cp.linalg.norm(y) + 1.0)
    if step % 50 == 0:
        acc += float(x.sum())
cp.cuda.Device().synchronize()
print("acc", acc)
