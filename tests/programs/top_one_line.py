"""Stand-in program for gpushim top's rows (tests/top.rs): one line of `Buf.__init__` calls the
stand-in cudaMalloc, reached from two functions in turn (two stacks, so two sites of one line),
64 KiB every 10 ms for 30 s at most, kept in a global list; says "ready" after the first four,
and runs until its stdin ends.
Usage: top_one_line.py LIBCUDART"""

import ctypes
import sys
import threading
import time

cudart = ctypes.CDLL(sys.argv[1])


class Buf:
    def __init__(self, n):
        p = ctypes.c_void_p()
        err = cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # the one line of both sites
        if err != 0:
            raise SystemExit(f"cudaMalloc failed: {err}")
        self.ptr = p.value


def from_even(n):
    return Buf(n)


def from_odd(n):
    return Buf(n)


kept = []
ended = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
i = 0
while not ended.is_set():
    if i < 3000:
        kept.append(from_even(64 << 10) if i % 2 == 0 else from_odd(64 << 10))
        i += 1
        if i == 4:
            print("ready", flush=True)
    # The program's own pace: one allocation per 10 ms.
    time.sleep(0.01)
