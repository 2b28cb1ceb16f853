"""Times cudaMalloc+cudaFree pairs (4 KiB, stand-in runtime, through ctypes) made from a Python
stack DEPTH frames deep; prints "median_ns p99_ns mean_ns" of the pairs, each timed alone.
Usage: python3 python_frames.py LIBCUDART N DEPTH   (scripts/bench-python.sh runs it)"""

import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
N = int(sys.argv[2])
DEPTH = int(sys.argv[3])
malloc = cudart.cudaMalloc
malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
free = cudart.cudaFree
free.argtypes = [ctypes.c_void_p]


def pairs():
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    clock = time.perf_counter_ns
    out = [0] * N
    for i in range(N):
        t0 = clock()
        malloc(ref, 4096)
        free(p)
        out[i] = clock() - t0
    return out


def nest(k):
    # k nest frames, then pairs(): with <module>, DEPTH Python frames in all.
    return nest(k - 1) if k > 1 else pairs()


sys.setrecursionlimit(10000)
t = nest(DEPTH - 2) if DEPTH > 2 else pairs()
t.sort()
print(t[N // 2], t[N * 99 // 100], sum(t) // N)
