"""Leak, truly lost: a native extension (ext_cache.cu, nvcc's static runtime, loaded with
ctypes) allocates a 4 MiB scratch buffer on every call and drops its pointer on return. 50
calls: 50 allocations with no pointer left anywhere.

Usage: ext_scratch.py LIBEXT fast|slow   (fast: 50 calls back to back; slow: 100 ms apart)"""

import ctypes
import sys
import time

ext = ctypes.CDLL(sys.argv[1])
SLOW = sys.argv[2] == "slow"
ext.ext_scratch.argtypes = [ctypes.c_size_t]
for _call in range(50):
    if ext.ext_scratch(4 << 20) != 0:
        raise SystemExit("ext_scratch failed")
    if SLOW:
        time.sleep(0.1)
ext.ext_clear_stack()
print("50 calls")
