"""Leak: a producer thread fills an unbounded `queue.Queue` (`batches`) with 64 KiB batches;
the consumer takes 5 and stops: 35 are left in the queue.
Usage: py_queue.py LIBCUDART fast|slow   (slow: the producer puts 50 ms apart)"""

import queue
import sys
import threading
import time

import devbuf

devbuf.load(sys.argv[1])
SLOW = sys.argv[2] == "slow"
batches = queue.Queue()


def producer(n):
    for _ in range(n):
        batches.put(devbuf.DevBuf(64 << 10))  # @leak
        if SLOW:
            time.sleep(0.05)


t = threading.Thread(target=producer, args=(40,), name="loader")
t.start()
used = [batches.get().nbytes for _ in range(5)]
t.join()
print("consumed", len(used), "left", batches.qsize())
