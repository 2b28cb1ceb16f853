"""The heap walk's speed (issue 12): a process holding N Python objects and T objects that own
GPU memory takes a snapshot; the walk's own time and object count come from its companion file.

Usage: python3 heapwalk.py torch N T              (T CUDA tensors of 1 KiB, needs a GPU)
       python3 heapwalk.py standin N T LIBCUDART  (T __cuda_array_interface__ objects inside
                                                   one stand-in allocation, no GPU)
HEAP=containers: the N objects are all lists (default: half lists, half strings).
Prints one line: walk status, seconds, objects visited, objects found.
"""

import glob
import json
import os
import signal
import sys
import time

mode, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


class Buf:
    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


if mode == "torch":
    import torch

    gpu = [torch.empty(256, device="cuda") for _ in range(t)]
    torch.cuda.synchronize()
else:
    import ctypes

    rt = ctypes.CDLL(sys.argv[4])
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(t * 1024)) == 0
    gpu = [Buf(p.value + i * 1024, 1024) for i in range(t)]
# N objects besides: half lists, half the distinct strings they hold; with HEAP=containers, N
# empty lists (every one walked: strings and numbers are not queued).
heap = [[] for _ in range(n)] if os.environ.get("HEAP") == "containers" else [[str(i)] for i in range(n // 2)]

out = os.environ.get("GPUSHIM_OUTPUT", ".")
pat = os.path.join(out, f"gpushim-{os.getpid()}-snapshot-*.holders.json")
os.kill(os.getpid(), signal.SIGUSR1)
end = time.monotonic() + 60
while not glob.glob(pat) and time.monotonic() < end:
    time.sleep(0.01)
files = glob.glob(pat)
if not files:
    sys.exit("no holders file")
time.sleep(0.2)  # the collector writes it whole; give a partial write time to end
with open(files[0]) as f:
    w = json.load(f)["walk"]
print(f"{w['status']} {w['elapsed_s']:.3f} s, {w['objects_visited']} objects visited, {w['objects_found']} found")
