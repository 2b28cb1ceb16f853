"""A nanoGPT-style training loop (our own code) on random tokens, eager or compiled.

With --keep-logits it appends each step's logits to a list "to look at later" (the leak: 16 MiB
a step, the output of GPT.forward's lm_head line in model.py); without it, it keeps only
`loss.item()` (the clean loop: memory flat after the first step's optimizer state).

Usage: train.py STEPS fast|slow [--compile] [--keep-logits]   (slow: 100 ms between steps)"""

import argparse
import time

import torch
from model import GPT, GPTConfig

ap = argparse.ArgumentParser()
ap.add_argument("steps", type=int)
ap.add_argument("speed", choices=["fast", "slow"])
ap.add_argument("--compile", action="store_true")
ap.add_argument("--keep-logits", action="store_true")
args = ap.parse_args()

torch.manual_seed(1337)
config = GPTConfig()
model = GPT(config).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
step_model = torch.compile(model) if args.compile else model
batch_size = 8


def get_batch():
    x = torch.randint(config.vocab_size, (batch_size, config.block_size), device="cuda")
    y = torch.randint(config.vocab_size, (batch_size, config.block_size), device="cuda")
    return x, y


kept_logits = []
losses = []
for it in range(args.steps):
    X, Y = get_batch()
    logits, loss = step_model(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if args.keep_logits:
        kept_logits.append(logits)
    if it % 10 == 0 or it == args.steps - 1:
        losses.append(loss.item())
    if args.speed == "slow":
        time.sleep(0.1)
torch.cuda.synchronize()
print(f"{args.steps} steps, last loss {losses[-1]:.3f}, kept {len(kept_logits)} logits")
