"""Negative: warm-up then flat. The first steps grow a set of eight 8 MiB scratch buffers (one
per stream of work, made on first use); from then on every step reuses them in place for
about two seconds.

Usage: warmup_flat.py"""

import time

import torch

scratch = {}


def buffer_for(slot):
    if slot not in scratch:
        scratch[slot] = torch.empty(2048, 1024, device="cuda")
    return scratch[slot]


x = torch.randn(2048, 1024, device="cuda")
end = time.monotonic() + 2.0
step = 0
while step < 8 or time.monotonic() < end:
    buf = buffer_for(step % 8)
    torch.mul(x, step, out=buf)
    step += 1
    if step > 8:
        time.sleep(0.005)
torch.cuda.synchronize()
print(step, "steps,", len(scratch), "buffers")
