"""Times cudaMalloc+cudaFree pairs (4 KiB, stand-in runtime, through ctypes) made from a Python
stack DEPTH frames deep; prints "median_ns p99_ns mean_ns" of the pairs, each timed alone.
KIND: "recursive" (default: the DEPTH - 2 outer frames are one function calling itself) or
"distinct" (each of them a function of its own: as many code objects as frames).
API: "sync" (default: cudaMalloc + cudaFree) or "async" (issue 18's pool hits: cudaMallocAsync +
cudaFreeAsync on a stream made by cudaStreamCreateWithFlags(cudaStreamNonBlocking); a block freed
on a stream is reused by the next allocation on it, CUDA Programming Guide, "Stream Ordered Memory
Allocator"). The stand-in runtime has no cudaStreamCreateWithFlags: there the stream is its
explicit stream of device 0 (handle 0x5000, as in scripts/bench/pairs.c).
Usage: python3 python_frames.py LIBCUDART N DEPTH [KIND] [API]   (scripts/bench-python.sh,
scripts/bench-cpu.sh and scripts/bench-gpu.sh run it)"""

import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
N = int(sys.argv[2])
DEPTH = int(sys.argv[3])
KIND = sys.argv[4] if len(sys.argv) > 4 else "recursive"
API = sys.argv[5] if len(sys.argv) > 5 else "sync"
if API not in ("sync", "async"):
    sys.exit(f"python_frames.py: API is sync or async, not {API!r}")
malloc = cudart.cudaMalloc
malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
free = cudart.cudaFree
free.argtypes = [ctypes.c_void_p]
# cudaStreamNonBlocking (CUDA Runtime API, cudaStreamCreateWithFlags).
STREAM_NON_BLOCKING = 1
# The stand-ins' explicit stream of device 0 (standins/cuda_contexts.c).
STANDIN_STREAM = 0x5000


def make_stream():
    """A stream of the current device: created by the runtime when it can, else the stand-ins'."""
    try:
        create = cudart.cudaStreamCreateWithFlags
    except AttributeError:
        return ctypes.c_void_p(STANDIN_STREAM)
    create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    s = ctypes.c_void_p()
    rc = create(ctypes.byref(s), STREAM_NON_BLOCKING)
    if rc != 0:
        sys.exit(f"python_frames.py: cudaStreamCreateWithFlags returned {rc}")
    return s


def pairs():
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    clock = time.perf_counter_ns
    out = [0] * N
    if API == "async":
        malloc_async = cudart.cudaMallocAsync
        malloc_async.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
        free_async = cudart.cudaFreeAsync
        free_async.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        stream = make_stream()
        for i in range(N):
            t0 = clock()
            malloc_async(ref, 4096, stream)
            free_async(p, stream)
            out[i] = clock() - t0
        return out
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
