"""Negative: cuda-python, a 4 MiB buffer allocated, set and freed every step for 300 steps,
beside a 64 MiB buffer held for the run and freed at the end.

Usage: flat.py"""

from cuda.bindings import runtime as cudart


def check(result):
    err, *rest = result
    if err != cudart.cudaError_t.cudaSuccess:
        raise SystemExit(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


weights = check(cudart.cudaMalloc(64 << 20))
for step in range(300):
    tmp = check(cudart.cudaMalloc(4 << 20))
    check(cudart.cudaMemset(tmp, step & 0xFF, 4 << 20))
    check(cudart.cudaFree(tmp))
check(cudart.cudaDeviceSynchronize())
check(cudart.cudaFree(weights))
print("done")
