"""Leak: the CUDA runtime called through ctypes; each step's 4 MiB buffer's address
(`p.value`, a Python int) is kept in a dict keyed by request id and never freed. Reachable
(the ints hold the pointers), not lost.

Usage: ctypes_ints.py fast|slow   (fast: 60 steps back to back; slow: 80 ms apart)"""

import ctypes
import glob
import os
import site
import sys
import time

SLOW = sys.argv[1] == "slow"


def load_cudart():
    names = ["libcudart.so.13", "libcudart.so"]
    for root in ["/usr/local/cuda/lib64", *glob.glob("/usr/local/cuda*/lib64")]:
        names += sorted(glob.glob(os.path.join(root, "libcudart.so*")))
    for sp in site.getsitepackages():
        names += sorted(glob.glob(os.path.join(sp, "nvidia", "**", "libcudart.so*"), recursive=True))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise SystemExit("no libcudart found")


cudart = load_cudart()
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def scratch(nbytes):
    p = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(p), nbytes)  # @leak
    if rc != 0:
        raise SystemExit(f"cudaMalloc returned {rc}")
    cudart.cudaMemset(p, 0, nbytes)
    return p.value


by_request = {}
for req in range(60):
    by_request[req] = scratch(4 << 20)
    if SLOW:
        time.sleep(0.08)
cudart.cudaDeviceSynchronize()
print("kept", len(by_request), "addresses")
