"""Negatives in Python over the stand-in runtime; MODE picks one:
  warmup    eight 64 KiB scratch buffers made in the first steps, then reused for 1.5 s
  deque     the last 8 results kept in a deque(maxlen=8) over 200 steps
  lru       lru_cache(maxsize=4) of buffers asked for 100 keys
  dict      a dict keyed by step % 8 (overwritten) over 200 steps
  short     three buffers made and dropped
  flat      a buffer made and dropped every step for 1.5 s
  ints      a fixed pool of 16 pointers (ints) made at start, held for 300 steps
  queue     a bounded Queue(maxsize=4) between a producer thread and a consumer, 100 items
Usage: py_negatives.py LIBCUDART MODE"""

import collections
import functools
import queue
import sys
import threading
import time

import devbuf

devbuf.load(sys.argv[1])
MODE = sys.argv[2]
KIB = 1 << 10

if MODE == "warmup":
    scratch = {}
    end = time.monotonic() + 1.5
    step = 0
    while step < 8 or time.monotonic() < end:
        if step % 8 not in scratch:
            scratch[step % 8] = devbuf.DevBuf(64 * KIB)
        step += 1
        time.sleep(0.005)
elif MODE == "deque":
    recent = collections.deque(maxlen=8)
    for _ in range(200):
        recent.append(devbuf.DevBuf(64 * KIB))
elif MODE == "lru":

    @functools.lru_cache(maxsize=4)
    def table(n):
        return devbuf.DevBuf(n)

    for step in range(100):
        table(16 * KIB + 256 * step)
elif MODE == "dict":
    by_slot = {}
    for step in range(200):
        by_slot[step % 8] = devbuf.DevBuf(64 * KIB)
elif MODE == "short":
    bufs = [devbuf.DevBuf(64 * KIB) for _ in range(3)]
    del bufs
elif MODE == "flat":
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        b = devbuf.DevBuf(64 * KIB)
        del b
        time.sleep(0.002)
elif MODE == "ints":
    pool = [devbuf.malloc(64 * KIB) for _ in range(16)]
    for step in range(300):
        devbuf.work(pool[step % 16], 64 * KIB)
elif MODE == "queue":
    q = queue.Queue(maxsize=4)

    def produce():
        for _ in range(100):
            q.put(devbuf.DevBuf(64 * KIB))
        q.put(None)

    t = threading.Thread(target=produce, name="loader")
    t.start()
    while q.get() is not None:
        pass
    t.join()
else:
    raise SystemExit(f"unknown mode {MODE}")
print("done", MODE)
