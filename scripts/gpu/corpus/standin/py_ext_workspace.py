"""Negative: the extension's workspace cache (ext_map.c), one buffer per size in a map (map.h),
4 sizes over 300 calls: bounded, held for the run.
Usage: py_ext_workspace.py LIBEXT"""

import ctypes
import sys

ext = ctypes.CDLL(sys.argv[1])
ext.ext_workspace.argtypes = [ctypes.c_size_t]
ext.ext_count.restype = ctypes.c_size_t
sizes = [16 << 10, 32 << 10, 64 << 10, 128 << 10]
for call in range(300):
    if ext.ext_workspace(sizes[call % 4]) != 0:
        raise SystemExit("ext_workspace failed")
print("workspaces", ext.ext_count())
