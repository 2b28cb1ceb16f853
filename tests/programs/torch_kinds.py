"""Stand-in program for tests/holders.rs: one training step's memory over the stand-in
caching allocator of fake_torch/, of every kind the report tells apart. A model's parameter
(4 MiB, line P), its gradient (4 MiB, line G), AdamW's two state tensors for it (4 MiB each,
line O), an activation that only the autograd graph of the loss keeps (2 MiB, line A; held from
native code, as PyTorch's saved tensors are), the loss (1 MiB, line L: another tensor) and a
freed scratch tensor whose block the pool keeps (3 MiB, line S). The program records its own
block stacks, and takes a snapshot (SIGUSR1) at the end, waiting for its walk's holders file.
Usage: torch_kinds.py LIBC10. Prints `done` and the lines P, G, O, A, L."""

import ctypes
import os
import signal
import sys
import time

os.environ["FAKE_C10"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torch", "site-packages"))
sys.dont_write_bytecode = True
import torch  # noqa: E402

MIB = 1 << 20


def line_of(marker):
    with open(os.path.abspath(__file__)) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "line_of(" not in line:
                return i
    return None


class Linear(torch.nn.Module):
    def __init__(self):
        self.weight = torch.tensor(4 * MIB, cls=torch.nn.Parameter)  # line P


def backward(model):
    model.weight.grad = torch.tensor(4 * MIB)  # line G


def adamw_step(opt, p):
    opt.state[p] = {"exp_avg": torch.tensor(4 * MIB), "exp_avg_sq": torch.tensor(4 * MIB)}  # line O


def forward():
    mul = torch.node("MulBackward0")
    h = torch.tensor(2 * MIB, grad_fn=mul)  # line A
    # Kept only by the graph, from native code (a C++ SavedVariable's reference).
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(h))
    return torch.tensor(MIB, grad_fn=torch.node("SumBackward0", mul))  # line L


torch.cuda.memory._record_memory_history(enabled="state", context="alloc", stacks="python")
model = Linear()
backward(model)
opt = torch.optim.AdamW(model.parameters())
adamw_step(opt, model.weight)
loss = forward()
scratch = torch.tensor(3 * MIB)  # line S
scratch.free()
del scratch
os.kill(os.getpid(), signal.SIGUSR1)
walked = os.path.join(os.environ["GPUSHIM_OUTPUT"], f"gpushim-{os.getpid()}-snapshot-1.holders.json")
deadline = time.monotonic() + 60
while not os.path.exists(walked):
    if time.monotonic() > deadline:
        raise SystemExit("no snapshot walk")
    time.sleep(0.005)
print("done", *(line_of(f"# line {x}") for x in "PGOAL"))
