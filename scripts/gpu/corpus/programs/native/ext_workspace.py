"""Negative: a native extension (ext_cache.cu, nvcc's static runtime, loaded with ctypes) keeps
one workspace per size in a std::map of its own globals; 300 calls over 4 sizes make 4
allocations at the start, then reuse them. The map holds them for the run.

Usage: ext_workspace.py LIBEXT"""

import ctypes
import sys

ext = ctypes.CDLL(sys.argv[1])
ext.ext_workspace.argtypes = [ctypes.c_size_t]
ext.ext_count.restype = ctypes.c_size_t
sizes = [1 << 20, 2 << 20, 8 << 20, 16 << 20]
for call in range(300):
    if ext.ext_workspace(sizes[call % 4]) != 0:
        raise SystemExit("ext_workspace failed")
print("workspaces", ext.ext_count())
