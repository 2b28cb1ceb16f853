"""Leak: a producer thread fills an unbounded `queue.Queue` with 8 MiB batches far ahead of
its consumer, which stops after a few (an early stop): 60 batches made, 5 consumed, the rest
left in the queue.

Usage: queue_ahead.py fast|slow   (fast: the producer puts back to back; slow: 80 ms apart)"""

import queue
import sys
import threading
import time

import torch

SLOW = sys.argv[1] == "slow"
batches = queue.Queue()


def producer(n):
    for _i in range(n):
        batches.put(torch.randn(2048, 1024, device="cuda"))  # @leak
        if SLOW:
            time.sleep(0.08)


def consume(n):
    total = 0.0
    for _ in range(n):
        total += float(batches.get().sum())
    return total


torch.zeros(1, device="cuda")  # the context, before the thread starts
t = threading.Thread(target=producer, args=(60,), name="loader")
t.start()
print("consumed", consume(5))
t.join()
torch.cuda.synchronize()
print("left in the queue", batches.qsize())
