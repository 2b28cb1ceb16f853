"""Leak, reachable: a native extension (ext_map.c, loaded with ctypes) keeps a 64 KiB buffer
per request key in a map of its own globals (map.h); keys never repeat.
Usage: py_ext_map.py LIBEXT fast|slow   (slow: 50 ms between requests)"""

import ctypes
import sys
import time

ext = ctypes.CDLL(sys.argv[1])
ext.ext_acquire.argtypes = [ctypes.c_long, ctypes.c_size_t]
ext.ext_count.restype = ctypes.c_size_t
SLOW = sys.argv[2] == "slow"
for key in range(40):
    if ext.ext_acquire(key, 64 << 10) != 0:
        raise SystemExit("ext_acquire failed")
    if SLOW:
        time.sleep(0.05)
print("buffers", ext.ext_count())
