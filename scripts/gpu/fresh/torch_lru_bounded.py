"""Negative: a size-bounded lru_cache of GPU tables, the fixed form of the lru_cache leak.

Mechanism, from public reports: the fix that projects applied after lru_cache leaks was to
bound the cache (or make it per instance), e.g. huggingface/transformers PR #45708 and
pytorch/pytorch PR #147233. Here the cache is `maxsize=8` and requests cycle over 24
padded lengths, so tables are evicted and freed all the time; the caching allocator keeps
the freed segments and reuses them. GPU memory rises while the cache fills and the
allocator's pool warms, then stays flat. Model weights are held for the whole run.

Truth: no leak (bounded cache, flat after warm-up).
"""

import functools
import sys

import torch

DIM = 512
BUCKETS = [256 + 64 * i for i in range(24)]


@functools.lru_cache(maxsize=8)
def rope_table(seq_len: int) -> torch.Tensor:
    pos = torch.arange(seq_len, device="cuda", dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, DIM, 2, device="cuda", dtype=torch.float32) / DIM))
    ang = torch.outer(pos, inv)
    return torch.cat([ang.sin(), ang.cos()], dim=-1).contiguous()


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 2048), torch.nn.GELU(), torch.nn.Linear(2048, DIM)).cuda()
    gen = torch.Generator().manual_seed(2)
    acc = 0.0
    with torch.no_grad():
        for step in range(steps):
            seq = BUCKETS[int(torch.randint(0, len(BUCKETS), (1,), generator=gen))]
            x = torch.randn(seq, DIM, device="cuda")
            y = model(x * rope_table(seq))
            if step % 50 == 0:
                acc += float(y.mean())
    torch.cuda.synchronize()
    info = rope_table.cache_info()
    print(
        f"{steps} requests; cache {info.currsize}/8 tables, hits {info.hits}, "
        f"allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB, "
        f"reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
