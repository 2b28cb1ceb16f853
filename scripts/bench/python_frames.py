"""Times cudaMalloc+cudaFree pairs (4 KiB, stand-in runtime, through ctypes) made from a Python
stack DEPTH frames deep; prints "median_ns p99_ns mean_ns" of the pairs, each timed alone.
KIND: "recursive" (default: the DEPTH - 2 outer frames are one function calling itself) or
"distinct" (each of them a function of its own: as many code objects as frames).
Usage: python3 python_frames.py LIBCUDART N DEPTH [KIND]   (scripts/bench-python.sh runs it)"""

import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
N = int(sys.argv[2])
DEPTH = int(sys.argv[3])
KIND = sys.argv[4] if len(sys.argv) > 4 else "recursive"
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


def distinct(k):
    # k functions, each calling the next, the last calling pairs(): k code objects.
    ns = {"pairs": pairs}
    for j in range(1, k + 1):
        inner = f"nest{j - 1}()" if j > 1 else "pairs()"
        exec(f"def nest{j}():\n    return {inner}\n", ns)
    return ns[f"nest{k}"]()


sys.setrecursionlimit(10000)
if DEPTH <= 2:
    t = pairs()
elif KIND == "distinct" and DEPTH > 3:
    # With distinct()'s own frame, pairs() and <module>: DEPTH Python frames in all.
    t = distinct(DEPTH - 3)
else:
    t = nest(DEPTH - 2)
t.sort()
print(t[N // 2], t[N * 99 // 100], sum(t) // N)
