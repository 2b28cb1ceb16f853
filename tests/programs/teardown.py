"""Stand-in program for tests/holders.rs: a leak that lives in a global list whose objects
free their stand-in cudaMalloc memory in __del__, so only the interpreter's teardown (after
the exit heap walk) frees it. Usage: teardown.py LIBCUDART."""

import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])


class DevBuf:
    """A device array that frees its memory when collected."""

    def __init__(self, n, free=cudart.cudaFree):
        p = ctypes.c_void_p()
        rc = cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
        if rc != 0:
            raise SystemExit(f"cudaMalloc returned {rc}")
        self.ptr = p
        self._free = free
        self.__cuda_array_interface__ = {"data": (p.value, False), "shape": (n // 4,), "typestr": "<f4", "version": 3}

    def __del__(self):
        self._free(self.ptr)


history = []
for _ in range(30):
    history.append(DevBuf(64 * 1024))
    time.sleep(0.002)
print("done", flush=True)
