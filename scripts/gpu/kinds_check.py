"""The kinds of memory on a GPU (issue 32): a small PyTorch training loop with AdamW, whose last
forward pass's graph is kept (its activations saved for backward), run under gpushim; then the
report's `memory_kinds` is set against PyTorch's own counts of the same moment, which the program
writes at its end: the parameters' and gradients' bytes, the optimizer state's, and
torch.cuda.memory_allocated() and memory_reserved().

Usage: python3 kinds_check.py run OUT.json      (the program: writes PyTorch's own counts)
       python3 kinds_check.py check OUT.json REPORT.json   (prints both, exits 1 on a mismatch)"""

import json
import sys


def run(out):
    # The model and its optimizer live for the whole program, as a training script's do: the
    # exit's heap walk must see what PyTorch's counts below saw (locals of run() are gone then).
    global model, opt
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(5):
        x = torch.randn(256, 1024, device=dev)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    # The last forward pass's graph is kept, unused: its saved activations stay on the GPU.
    global pending
    pending = model(torch.randn(512, 1024, device=dev)).square().mean()
    torch.cuda.synchronize()

    def nbytes(t):
        return t.untyped_storage().nbytes()

    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.is_cuda]
    own = {
        "parameters": sum(nbytes(p) for p in params),
        "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
        "optimizer_state": sum(nbytes(t) for t in state),
        "memory_allocated": torch.cuda.memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
    }
    with open(out, "w") as f:
        json.dump(own, f)


def check(own_path, report_path):
    with open(own_path) as f:
        own = json.load(f)
    with open(report_path) as f:
        r = json.load(f)
    kinds = r.get("memory_kinds") or []
    if not kinds:
        print("no memory_kinds in the report")
        return 1
    d = kinds[0]
    by = {k["kind"]: k["bytes"] for k in d["kinds"]}
    print("ours:", json.dumps(d["kinds"], indent=1))
    print("pytorch's:", own)
    tensors = d["tensor_bytes"] + by.get("allocated_no_tensor", 0)
    rows = [
        ("parameters", by.get("parameters", 0), own["parameters"]),
        ("gradients", by.get("gradients", 0), own["gradients"]),
        ("optimizer_state", by.get("optimizer_state", 0), own["optimizer_state"]),
        ("tensor kinds + allocated_no_tensor vs memory_allocated", tensors, own["memory_allocated"]),
        (
            "cached_free vs reserved - allocated",
            by.get("cached_free", 0),
            own["memory_reserved"] - own["memory_allocated"],
        ),
        ("tensor kinds vs memory_allocated (1%)", d["tensor_bytes"], own["memory_allocated"]),
    ]
    bad = 0
    for name, ours, theirs in rows:
        ok = abs(ours - theirs) <= 0.01 * max(theirs, 1)
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name}: ours {ours} pytorch {theirs}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3]))
