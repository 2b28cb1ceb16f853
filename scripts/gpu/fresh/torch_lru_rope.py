"""Leak: an unbounded functools.lru_cache that memoises a GPU table per sequence length.

Mechanism, from public reports: `functools.lru_cache` (maxsize=None) on a helper that
builds a rotary/positional table on the GPU for each new sequence length. An inference
server sees a new length on almost every request, so the cache keeps one GPU tensor per
length forever. Sources: huggingface/transformers PR #45708 (per-instance lru_cache to fix
the RT-DETR leak, issue #45412), pytorch/pytorch PR #147233 ("Putting lru_cache on methods
will keep pointers ... alive forever and leak memory"), ruff B019.

Truth: leak. The tables are created at the line with the leak marker and held by the cache of the
module-level function `rope_table` (the lru_cache wrapper).
"""

import functools
import sys

import torch

DIM = 512


@functools.lru_cache(maxsize=None)  # noqa: UP033 (the form of the reports)
def rope_table(seq_len: int) -> torch.Tensor:
    pos = torch.arange(seq_len, device="cuda", dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, DIM, 2, device="cuda", dtype=torch.float32) / DIM))
    ang = torch.outer(pos, inv)
    return torch.cat([ang.sin(), ang.cos()], dim=-1).contiguous()  # @leak


def apply_rope(x: torch.Tensor) -> torch.Tensor:
    table = rope_table(x.shape[0])
    return x * table


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 240
    torch.manual_seed(0)
    proj = torch.nn.Linear(DIM, DIM).cuda()
    gen = torch.Generator().manual_seed(1)
    total = 0.0
    with torch.no_grad():
        for _step in range(steps):
            # request lengths vary: nearly every request brings a new length
            seq = 600 + int(torch.randint(0, 1400, (1,), generator=gen))
            x = torch.randn(seq, DIM, device="cuda")
            y = proj(apply_rope(x))
            total += float(y[0, 0])
    torch.cuda.synchronize()
    info = rope_table.cache_info()
    print(
        f"served {steps} requests; rope cache holds {info.currsize} tables, "
        f"allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
