"""Negative: a bounded `functools.lru_cache(maxsize=4)` of CuPy arrays (a window per length),
asked for 60 lengths; it holds at most 4, evicted ones go back to CuPy's pool and are reused.

Usage: lru_bounded.py"""

import functools

import cupy as cp


@functools.lru_cache(maxsize=4)
def window(n):
    return cp.hanning(n).astype(cp.float32) * cp.ones((256, 1), dtype=cp.float32)


total = 0.0
for step in range(60):
    total += float(window(4096 + 16 * (step % 12)).sum())
cp.cuda.Device().synchronize()
print("cached", window.cache_info().currsize, total)
