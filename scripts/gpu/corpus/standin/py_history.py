"""Leak: each step's 64 KiB result kept in a module-level list `history`.
Usage: py_history.py LIBCUDART fast|slow   (slow: 50 ms between steps)"""

import sys
import time

import devbuf

devbuf.load(sys.argv[1])
SLOW = sys.argv[2] == "slow"
history = []


def train_step(step):
    out = devbuf.DevBuf(64 << 10)  # @leak
    return out


for step in range(40):
    history.append(train_step(step))
    if SLOW:
        time.sleep(0.05)
print("kept", len(history))
