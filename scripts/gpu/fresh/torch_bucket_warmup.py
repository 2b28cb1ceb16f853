"""Negative: memory that grows during warm-up and then plateaus (length buckets, lazy Adam
state, cudnn/cublas workspaces, the caching allocator keeping freed blocks).

Mechanism, from public reports: users see "GPU memory keeps increasing" over the first
iterations of training with variable sequence lengths and suspect a leak; the answer on the
PyTorch forums is that the caching allocator keeps and grows its segments until the largest
shapes have been seen, and Adam's state is allocated on the first step, after which memory
is stable. Sources: discuss.pytorch.org "What exactly is occupying the GPU cache?"
(t/80645), "Control GPU memory cache" (t/175356), and pytorch/pytorch issues about
reserved memory growing with variable input sizes.

Here batches come from 6 length buckets in random order, the largest bucket first appears
after some steps, and the run continues for hundreds of steps after all buckets have been
seen. Nothing is retained across steps except the model, optimizer state and a Python
float history.

Truth: no leak (growth then plateau).
"""

import sys

import torch
import torch.nn as nn

BUCKETS = [64, 128, 192, 256, 384, 512]


class Tiny(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.emb = nn.Embedding(8000, d)
        layer = nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(d, 8000)

    def forward(self, tok):
        return self.head(self.enc(self.emb(tok)))


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    torch.manual_seed(0)
    model = Tiny().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(3)
    # the schedule: small buckets first (a curriculum), then all of them at random
    history = []
    for step in range(steps):
        if step < 40:  # noqa: SIM108
            L = BUCKETS[step % 3]
        else:
            L = BUCKETS[int(torch.randint(0, len(BUCKETS), (1,), generator=gen))]
        tok = torch.randint(0, 8000, (8, L), device="cuda")
        logits = model(tok)
        loss = nn.functional.cross_entropy(logits.view(-1, 8000), tok.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        history.append(loss.item())
        if step % 100 == 0:
            print(f"step {step}: loss {history[-1]:.3f}, reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB")
    torch.cuda.synchronize()
    print(f"done: peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
