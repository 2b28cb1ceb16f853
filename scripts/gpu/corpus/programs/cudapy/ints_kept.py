"""Leak: NVIDIA's cuda-python runtime API hands device pointers out as Python ints
(`err, ptr = cudart.cudaMalloc(n)`); the program keeps each step's 4 MiB buffer's pointer in a
list and never frees it. The pointers are in the program's memory (inside int objects), so
nothing is lost: reachable.

Usage: ints_kept.py fast|slow   (fast: 60 steps back to back; slow: 80 ms apart)"""

import sys
import time

from cuda.bindings import runtime as cudart

SLOW = sys.argv[1] == "slow"


def check(result):
    err, *rest = result
    if err != cudart.cudaError_t.cudaSuccess:
        raise SystemExit(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


def alloc_batch(nbytes):
    ptr = check(cudart.cudaMalloc(nbytes))  # @leak
    check(cudart.cudaMemset(ptr, 0, nbytes))
    return ptr


batches = []
for _step in range(60):
    batches.append(alloc_batch(4 << 20))
    if SLOW:
        time.sleep(0.08)
check(cudart.cudaDeviceSynchronize())
print("kept", len(batches), "pointers")
