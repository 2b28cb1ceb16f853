"""GPU check of `gpushim report --format torch-snapshot` (docs/torch-snapshot.md) against PyTorch's
own snapshot of the same moment.

Run under libgpushim.so (scripts/gpu-matrix.sh, case torch_snapshot): trains a small model with
torch's memory history recording on, then at the end, with nothing allocating any more, takes
torch's snapshot (torch.cuda.memory._snapshot()) and asks the shim for a snapshot of its own
(SIGUSR1), waits for that report, exports it with `gpushim report FILE --format torch-snapshot`,
runs torch.cuda._memory_viz's segment_plot, trace_plot, segsum and trace on the export, and
compares it with torch's: the segments PyTorch's caching allocator made (ours: those whose
frames pass through libc10_cuda, so that memory CUDA libraries allocated on their own is left
out) in count and total bytes. Prints one line per check and PASS or FAIL last; writes the
numbers to truth.json for compare.py.

Usage: python3 torch-snapshot-check.py [OUT_JSON]   (GPUSHIM_BIN: the gpushim binary, default
target/release/gpushim beside this checkout)
"""

import glob
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.cuda import _memory_viz

ROOT = Path(__file__).resolve().parents[2]
GPUSHIM = os.environ.get("GPUSHIM_BIN", str(ROOT / "target" / "release" / "gpushim"))


def train(steps=20):
    """A small MLP trained with Adam on random data: the caching allocator makes several segments."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return model, opt


def our_snapshot(timeout_s=120.0):
    """Asks the shim for a snapshot (SIGUSR1) and returns its report's path once written whole."""
    out = Path(os.environ.get("GPUSHIM_OUTPUT", "."))
    pattern = str(out / f"gpushim-{os.getpid()}-snapshot-*.json")
    before = {p for p in glob.glob(pattern) if not p.endswith(".holders.json")}
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = {p for p in glob.glob(pattern) if not p.endswith(".holders.json")} - before
        if new:
            return Path(sorted(new)[0])  # reports appear whole (hard-linked into place)
        time.sleep(0.05)
    raise SystemExit(f"FAIL: no gpushim snapshot report appeared in {out} within {timeout_s} s (run under the shim)")


def through_torch_allocator(seg):
    return any("c10_cuda" in f["filename"] or "CUDACachingAllocator" in f["name"] for f in seg["frames"])


def keys(snap):
    seg = snap["segments"][0] if snap["segments"] else {}
    block = seg.get("blocks", [{}])[0] if seg else {}
    entry = next((e for t in snap.get("device_traces", []) for e in t if e["action"] == "segment_alloc"), {})
    return {"snapshot": set(snap), "segment": set(seg), "block": set(block), "trace entry": set(entry)}


def main():
    out_json = sys.argv[1] if len(sys.argv) > 1 else "truth.json"
    torch.cuda.memory._record_memory_history(max_entries=100000)
    model, opt = train()
    theirs = torch.cuda.memory._snapshot()
    report = our_snapshot()
    export = report.with_suffix(".pickle")
    # The export itself runs untraced.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    cmd = [GPUSHIM, "report", str(report), "--format", "torch-snapshot", "-o", str(export)]
    subprocess.run(cmd, check=True, env=env)
    with export.open("rb") as f:
        ours = pickle.load(f)

    viz_ok = True
    # torch's own viewers on our file: the two plots, the segment summary and the trace listing.
    for name, fn in [
        ("segment_plot", _memory_viz.segment_plot),
        ("trace_plot", _memory_viz.trace_plot),
        ("segsum", _memory_viz.segsum),
        ("trace", _memory_viz.trace),
    ]:
        try:
            text = fn(ours)
            print(f"{name}: {len(text)} characters")
            viz_ok = viz_ok and len(text) > 0
        except Exception as e:
            print(f"{name}: FAILED: {e!r}")
            viz_ok = False

    t_segs = [s for s in theirs["segments"] if s["device"] == torch.cuda.current_device()]
    o_all = [s for s in ours["segments"] if s["device"] == torch.cuda.current_device()]
    o_segs = [s for s in o_all if through_torch_allocator(s)]
    t_count, t_bytes = len(t_segs), sum(s["total_size"] for s in t_segs)
    o_count, o_bytes = len(o_segs), sum(s["total_size"] for s in o_segs)
    print(f"torch: {t_count} segments, {t_bytes} bytes (memory_reserved {torch.cuda.memory_reserved()})")
    print(f"gpushim: {o_count} segments through libc10_cuda, {o_bytes} bytes; {len(o_all)} segments in all")
    count_ok, bytes_ok = t_count == o_count, t_bytes == o_bytes
    print(f"segment count equal: {count_ok}; total bytes equal: {bytes_ok}")
    ok = viz_ok and count_ok and bytes_ok and t_count > 0
    # The same addresses and sizes, segment by segment.
    same = {(s["address"], s["total_size"]) for s in t_segs} == {(s["address"], s["total_size"]) for s in o_segs}
    print(f"same (address, size) set: {same}")
    ok = ok and same
    # The pool each segment is in, as torch says it and as ours guesses it from the size.
    kinds = {s["address"]: s["segment_type"] for s in t_segs}
    agree = sum(kinds.get(s["address"]) == s["segment_type"] for s in o_segs)
    print(f"segment_type agrees for {agree} of {len(o_segs)} segments")
    types_ok = agree == len(o_segs)
    # Keys torch writes that ours lacks (or the other way): said, not failed on.
    tk, ok_keys = keys(theirs), keys(ours)
    for what in tk:
        if tk[what] - ok_keys[what] or ok_keys[what] - tk[what]:
            only_torch, only_ours = sorted(tk[what] - ok_keys[what]), sorted(ok_keys[what] - tk[what])
            print(f"keys of a {what}: torch only {only_torch}, ours only {only_ours}")
    with open(out_json, "w") as f:
        json.dump(
            {
                "torch_segments": t_count,
                "torch_bytes": t_bytes,
                "ours_segments": o_count,
                "ours_bytes": o_bytes,
                "ours_all_segments": len(o_all),
                "same_addresses": same,
                "viz_ok": viz_ok,
                "segment_types_agree": types_ok,
                "export": str(export),
            },
            f,
        )
    del model, opt
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
