"""Leak: a forward hook that records activations and is never cleared.

Mechanism, from public reports: a forward hook (for feature extraction, per-sample
gradients or debugging) stores each call's output; during evaluation under
`torch.no_grad()` nothing consumes or clears the stored activations, so they pile up on
the GPU. Source: meta-pytorch/opacus issue #176 ("torch.no_grad() creates memory leak
because of forward hook": hooks save activations that are never deleted), and
pytorch/pytorch issue #46386 (GPU memory kept by a forward hook).

Truth: leak. The hook's copy (cast to fp16 "to save memory") is made at the line with
the leak marker and kept in the list `saved` of the global `recorder`.
"""

import sys

import torch
import torch.nn as nn


class Recorder:
    def __init__(self):
        self.saved = []

    def __call__(self, module, inputs, output):
        self.saved.append(output.detach().to(torch.float16))  # @leak


recorder = Recorder()


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()


def main() -> int:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    torch.manual_seed(0)
    model = build_model()
    model[2].register_forward_hook(recorder)  # features of the second layer
    model.eval()
    correct = 0
    with torch.no_grad():
        for _i in range(batches):
            x = torch.randn(256, 1024, device="cuda")
            y = torch.randint(0, 10, (256,), device="cuda")
            logits = model(x)
            correct += int((logits.argmax(-1) == y).sum())
    torch.cuda.synchronize()
    print(
        f"evaluated {batches} batches, acc {correct / (256 * batches):.3f}; recorder holds "
        f"{len(recorder.saved)} activations, allocated "
        f"{torch.cuda.memory_allocated() / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
