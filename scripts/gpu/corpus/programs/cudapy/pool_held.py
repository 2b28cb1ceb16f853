"""Negative: cuda-python, a fixed pool of 16 buffers of 8 MiB allocated at start (pointers as
ints in a list), used round-robin for 400 steps and held until exit: no growth after start.

Usage: pool_held.py"""

from cuda.bindings import runtime as cudart


def check(result):
    err, *rest = result
    if err != cudart.cudaError_t.cudaSuccess:
        raise SystemExit(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


pool = [check(cudart.cudaMalloc(8 << 20)) for _ in range(16)]
for step in range(400):
    check(cudart.cudaMemset(pool[step % len(pool)], step & 0xFF, 8 << 20))
check(cudart.cudaDeviceSynchronize())
print("pool of", len(pool))
