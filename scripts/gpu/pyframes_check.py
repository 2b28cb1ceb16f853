"""Python frames on a real GPU, with PyTorch. Run it under the shim:

    LD_PRELOAD=$PWD/target/release/libgpushim.so GPUSHIM_COLLECTOR=$PWD/target/release/gpushim \
        GPUSHIM_OUTPUT=/tmp/pyframes python3 scripts/gpu/pyframes_check.py

A nested function leaks one 16 MiB CUDA tensor per training step (16 MiB is past the caching
allocator's 10 MiB mark, so each one is its own cudaMalloc). The script then asks the shim for
a snapshot (SIGUSR1), waits for the collector to write it, and checks that the snapshot's top
leak suspect's first Python frame is this file at the line of the leaking `torch.empty` call.
Prints one line, starting PASS or FAIL; exits 0 or 1.
"""

import json
import os
import signal
import sys
import time

STEPS = 24
MIB = 1 << 20


def fail(why):
    print(f"FAIL pyframes: {why}")
    sys.exit(1)


if "libgpushim" not in os.environ.get("LD_PRELOAD", ""):
    fail("not running under the shim: set LD_PRELOAD to target/release/libgpushim.so")

import torch  # noqa: E402  (after the check: importing torch is slow)


def grow(keep):
    keep.append(torch.empty(16 * MIB, dtype=torch.uint8, device="cuda"))  # @leak


def train_step(keep):
    x = torch.ones(1024, 1024, device="cuda")
    grow(keep)
    return float(x.sum())


def main():
    keep = []
    for _ in range(STEPS):
        train_step(keep)
        torch.cuda.synchronize()
        time.sleep(0.02)
    return keep


def expected_line():
    with open(__file__, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith("# @leak"):
                return n
    fail("no '# @leak' line in the script")


kept = main()
os.kill(os.getpid(), signal.SIGUSR1)
out = os.environ.get("GPUSHIM_OUTPUT") or os.getcwd()
path = os.path.join(os.path.abspath(out), f"gpushim-{os.getpid()}-snapshot-1.json")
deadline = time.monotonic() + 120
while not os.path.exists(path):
    if time.monotonic() > deadline:
        fail(f"no snapshot at {path} after 120 s (is GPUSHIM_COLLECTOR the gpushim binary?)")
    time.sleep(0.05)
with open(path, encoding="utf-8") as f:
    report = json.load(f)

suspects = report.get("suspects") or []
if not suspects:
    fail(f"the snapshot has no leak suspect ({path})")
site = next((s for s in report["sites"] if s["id"] == suspects[0]["site"]), None)
if site is None:
    fail(f"the top suspect's site {suspects[0]['site']} is not listed ({path})")
py = [f for f in site["frames"] if f.get("python")]
if not py:
    fail(f"the top suspect has no Python frames (site python={site.get('python')}; {path})")
first = py[0]
want_file, want_line = os.path.realpath(__file__), expected_line()
got = f"{first['function']} {first['file']}:{first['line']}"
versions = f"python {sys.version.split()[0]}, torch {torch.__version__}"
if os.path.realpath(first["file"] or "") != want_file or first["line"] != want_line or first["function"] != "grow":
    fail(f"top suspect's first Python frame is {got}, expected grow {want_file}:{want_line} ({versions}; {path})")
chain = " <- ".join(f"{f['function']}:{f['line']}" for f in py)
live = site["live_bytes"] / MIB
print(f"PASS pyframes: top suspect {live:.0f} MiB live at {got}; Python frames {chain} ({versions})")
