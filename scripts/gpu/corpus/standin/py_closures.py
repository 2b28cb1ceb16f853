"""Leak: callbacks registered in a module-level dict `_CALLBACKS`, each a closure over a 64 KiB
buffer made for it.
Usage: py_closures.py LIBCUDART fast|slow   (slow: 50 ms between registrations)"""

import sys
import time

import devbuf

devbuf.load(sys.argv[1])
SLOW = sys.argv[2] == "slow"
_CALLBACKS = {}


def make_callback(step):
    table = devbuf.DevBuf(64 << 10)  # @leak

    def callback():
        return table.nbytes * step

    return callback


for step in range(40):
    _CALLBACKS[f"cb{step}"] = make_callback(step)
    if SLOW:
        time.sleep(0.05)
print("registered", len(_CALLBACKS))
