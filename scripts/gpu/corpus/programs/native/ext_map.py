"""Leak, reachable: a native extension (ext_cache.cu, built by nvcc with its static runtime,
loaded with ctypes) keeps a 4 MiB device buffer per request key in a std::map of its own
globals; every request has a new key, so the map grows. Every pointer stays in the map.

Usage: ext_map.py LIBEXT fast|slow   (fast: 50 requests back to back; slow: 100 ms apart)"""

import ctypes
import sys
import time

ext = ctypes.CDLL(sys.argv[1])
SLOW = sys.argv[2] == "slow"
ext.ext_acquire.argtypes = [ctypes.c_long, ctypes.c_size_t]
ext.ext_count.restype = ctypes.c_size_t
for request in range(50):
    if ext.ext_acquire(request, 4 << 20) != 0:
        raise SystemExit("ext_acquire failed")
    if SLOW:
        time.sleep(0.1)
print("buffers in the extension", ext.ext_count())
