"""Leak: an epoch metric that keeps every batch's predictions on the GPU and is never reset
(AMP training, PyTorch's cudaMallocAsync backend).

Mechanism, from public reports: a metric with "list/cat" states (AUROC, AP, confusion over
all samples) appends each batch's probabilities and targets on the device; the training
script forgets `reset()` at epoch end, so the state grows for the whole run. Sources:
Lightning-AI/torchmetrics issue #1949 ("Memory leak when creating multiple instances of the
same metric": BinaryAUROC etc. keep their states on the GPU without reset()), #2481
(retrieval metrics' list states grow GPU memory), and
NRCan/geo-deep-learning issue #582 (memory rises every epoch until reset() was added).
The program runs with `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync` (set by the
manifest), so every tensor is its own cudaMallocAsync allocation.

Truth: leak. The probabilities are made at the line with the leak marker and held by the list
`preds` of the global `metric`.
"""

import os
import sys

import torch
import torch.nn as nn


class EpochAUROC:
    def __init__(self):
        self.preds = []
        self.targets = []

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        self.preds.append(logits.detach().float().softmax(dim=-1))  # @leak
        self.targets.append(target.detach())

    def compute(self) -> float:
        p = torch.cat(self.preds)
        t = torch.cat(self.targets)
        return float((p.argmax(-1) == t).float().mean())

    def reset(self) -> None:
        self.preds.clear()
        self.targets.clear()


metric = EpochAUROC()


def main() -> int:
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    print("PYTORCH_CUDA_ALLOC_CONF =", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1000)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for _ in range(steps):
            x = torch.randn(512, 512, device="cuda")
            y = torch.randint(0, 1000, (512,), device="cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            metric.update(logits, y)
        acc = metric.compute()
        # bug: metric.reset() is missing here
        print(f"epoch {epoch}: acc {acc:.4f}, metric holds {len(metric.preds)} batches")
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
