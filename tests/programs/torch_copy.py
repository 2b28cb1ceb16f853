"""Stand-in program for tests/holders.rs: what the program sees of the copy of itself the shim
makes to take PyTorch's snapshot (over the stand-in torch of fake_torch/). Usage:
torch_copy.py LIBC10 MODE. It allocates one tensor through libc10_cuda.so and waits for the
shim's look at the allocator (which the stand-in makes in the copy), then, by MODE:
- `wakeup`: asyncio's way of hearing signals (`signal.set_wakeup_fd`) with a SIGUSR2 handler;
  the test sends SIGUSR2 to the program and to its copy (as a Ctrl-C reaches a process group)
  while the copy runs; once the handler ran, prints `wakeup bytes N`, what the wakeup
  descriptor got.
- `crash`: nothing more (the test makes the stand-in's snapshot crash in the copy).
- `interrupt`: the test sends SIGINT (a Ctrl-C) to the program while the copy runs; prints
  `KeyboardInterrupt` where the program got it, or `no KeyboardInterrupt` after 10 s.
- `kill`: waits to be killed (the test sends SIGKILL while the copy runs); prints `not killed`
  after 60 s."""

import os
import signal
import sys
import time

os.environ["FAKE_C10"] = sys.argv[1]
MODE = sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torch", "site-packages"))
sys.dont_write_bytecode = True
import torch  # noqa: E402

if MODE == "wakeup":
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    handled = []
    signal.signal(signal.SIGUSR2, lambda *_: handled.append(1))

if MODE == "interrupt":
    # Python's own handler, whatever the launcher left (a shell's background job ignores SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)

t = None
try:
    # The shim's look can run at any bytecode from the allocation on: the KeyboardInterrupt too.
    t = torch.empty(1 << 20)
    deadline = time.monotonic() + 30
    while not torch.looked() and time.monotonic() < deadline:
        time.sleep(0.001)
    print("looked", torch.looked(), flush=True)
    if MODE == "interrupt":
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.001)
        print("no KeyboardInterrupt")
except KeyboardInterrupt:
    if MODE != "interrupt":
        raise
    print("KeyboardInterrupt")

if MODE == "wakeup":
    deadline = time.monotonic() + 30
    while not handled and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        n = len(os.read(wake_r, 4096))
    except BlockingIOError:
        n = 0
    print("wakeup bytes", n)
elif MODE == "kill":
    time.sleep(60)
    print("not killed")
if t is not None:
    t.free()
