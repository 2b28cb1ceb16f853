"""Stand-in program for gpushim top's site detail (tests/top.rs): keeps eight 64 KiB buffers of
the stand-in cudaMalloc in a global list, says "ready", and runs Python code (so that a heap
walk's pending call runs) until its stdin ends.
Usage: top_holders.py LIBCUDART"""

import ctypes
import sys
import threading
import time

cudart = ctypes.CDLL(sys.argv[1])


class DevBuf:
    """A device array the way Numba and CuPy expose one."""

    def __init__(self, n):
        p = ctypes.c_void_p()
        if cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) != 0:
            raise SystemExit("cudaMalloc failed")
        self.__cuda_array_interface__ = {"data": (p.value, False), "shape": (n // 4,), "typestr": "<f4", "version": 3}


kept = []
for _ in range(8):
    kept.append(DevBuf(64 << 10))
ended = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
print("ready", flush=True)
while not ended.is_set():
    time.sleep(0.005)
