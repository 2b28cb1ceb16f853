"""Times stream-ordered pairs made on a stand-in autograd engine thread (scripts/bench/engine.c)
while this thread waits in a frame named `_engine_run_backward`, DEPTH Python frames deep, as
`loss.backward()` waits for PyTorch's engine. Prints "median_ns p99_ns mean_ns" of the pairs,
each timed alone, over ROUNDS backward passes of N pairs each.
Usage: python3 engine_backward.py LIBCUDART LIBENGINE N ROUNDS DEPTH"""

import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
engine = ctypes.CDLL(sys.argv[2])
N, ROUNDS, DEPTH = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
engine.run_backward.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
times = (ctypes.c_uint64 * N)()
every = []


def _engine_run_backward():
    if engine.run_backward(N, times) != 0:
        raise SystemExit("engine_backward.py: a pair failed")
    every.extend(times)


def backward(k):
    # k frames, then the waiting one: with <module>, DEPTH Python frames in all.
    return backward(k - 1) if k > 1 else _engine_run_backward()


for _ in range(ROUNDS):
    backward(max(DEPTH - 2, 1))
every.sort()
print(every[len(every) // 2], every[len(every) * 99 // 100], sum(every) // len(every))
