"""Stand-in program for tests/holders.rs: a training loop that keeps every step's logits, over
the stand-in caching allocator of fake_torch/. Each step allocates a temporary (line A), the
model's output (the model's line) and another temporary (line B), then frees the temporaries:
from the second step on, the kept output reuses the segment line B made the step before, so
every growing segment is made at line B while the memory in it was allocated at the model's
line. Usage: torch_blocks.py LIBC10 MODE, MODE `default`, `own` (the program records its own
history first), `cleared` (the kept outputs are freed after the loop: the pool keeps the
segments, free) or `pool` (each step also makes and frees a scratch tensor of a new size at
line M: the pool grows segments that end up free, around the kept outputs). Prints `done`,
the lines, and the record calls."""

import os
import sys
import time

os.environ["FAKE_C10"] = sys.argv[1]
MODE = sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torch", "site-packages"))
sys.dont_write_bytecode = True
import torch  # noqa: E402

BLOCK = 1 << 20
STEPS = 30


def line_of(marker):
    with open(os.path.abspath(__file__)) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "line_of(" not in line:
                return i
    return None


class Model:
    def forward(self):
        return torch.empty(BLOCK)  # the model's line


def step(model, kept):
    a = torch.empty(BLOCK)  # line A
    logits = model.forward()
    b = torch.empty(BLOCK)  # line B
    a.free()
    b.free()
    if MODE == "pool":
        scratch = torch.empty(BLOCK + 4096 * len(kept))  # line M
        scratch.free()
    kept.append(logits)
    time.sleep(0.002)  # the step's compute: the leak grows over the run, not in a burst


if MODE == "own":
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
model, kept = Model(), []
first = torch.empty(BLOCK)
first.free()
# The shim turns the record on (after a look at torch.cuda.memory._snapshot()) from the main
# thread between two bytecodes, once its writer has seen an allocation come through
# libc10_cuda.so: wait for its look (at most 30 s; not at all when the test expects none).
deadline = time.monotonic() + (30 if os.environ.get("EXPECT_LOOK") == "1" else 0)
while not torch.looked() and time.monotonic() < deadline:
    time.sleep(0.001)
for _ in range(STEPS):
    step(model, kept)
if MODE == "cleared":
    for t in kept:
        t.free()
print("inductor imported:", "torch._inductor" in sys.modules)
print("done", line_of("# the model's line"), line_of("# line B"), line_of("# line M"), torch.record_calls)
