"""GPT-2 (`GPT2LMHeadModel(GPT2Config())`, random weights and token ids): STEPS training steps
with AdamW, then `generate`, offline. Prints the work's seconds, then CLOCK_MONOTONIC (ns) as its
last act, for scripts/gpu/perf_suite.py.

Usage: python3 work_gpt2.py [STEPS=10]
"""

import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
torch.manual_seed(0)
t0 = time.perf_counter()
model = GPT2LMHeadModel(GPT2Config()).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 50257, (8, 256), device="cuda")
model.train()
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    gen = model.generate(ids[:2, :16], max_new_tokens=32, do_sample=False, pad_token_id=0)
torch.cuda.synchronize()
print(f"work {time.perf_counter() - t0:.3f} s, generated {tuple(gen.shape)}")
if os.environ.get("GPUSHIM_SUITE_MAPS") == "1":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import maps_summary

    maps_summary.main()
print(time.monotonic_ns(), flush=True)
