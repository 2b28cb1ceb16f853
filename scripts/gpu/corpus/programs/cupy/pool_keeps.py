"""Negative: CuPy's memory pool keeps freed blocks. A 512 MiB array is made and dropped 20
times; the pool reuses the same block and keeps it (no free_all_blocks()).

Usage: pool_keeps.py"""

import cupy as cp

MIB = 1 << 20
pool = cp.get_default_memory_pool()
for rnd in range(20):
    a = cp.empty(512 * MIB, dtype=cp.uint8)
    a.fill(rnd)
    del a
cp.cuda.Device().synchronize()
print("pool total", pool.total_bytes() // MIB, "MiB, used", pool.used_bytes())
