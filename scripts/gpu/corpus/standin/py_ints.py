"""Leak, reachable: device pointers kept as Python ints (as cuda-python hands them out, or
ctypes' `p.value`) in a list; never freed. No Python object owns the memory (no holder).
Usage: py_ints.py LIBCUDART fast|slow   (slow: 50 ms between steps)"""

import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
SLOW = sys.argv[2] == "slow"
pointers = []


def alloc(n):
    p = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(p), n) != 0:  # @leak
        raise SystemExit("cudaMalloc failed")
    return p.value


for _ in range(40):
    pointers.append(alloc(64 << 10))
    if SLOW:
        time.sleep(0.05)
print("kept", len(pointers))
