"""Leak: an evaluation loop that appends every batch's logits (device arrays) to a list.

Mechanism, from public reports: evaluation code collects per-batch predictions on the device
"to compute metrics at the end" and the list grows with the number of batches until OOM.
Sources: yoxu515/aot-benchmark issue #74 ("The append approach is going to require a lot of
memory" in the evaluator), google-research/runtime-error-prediction PR #64 ("Fix OOM errors
due to new eval metrics": too large on-device tensors during eval), and jax-ml/jax issue
#10007 (device buffers accumulating in a Python loop while references are kept).

With `XLA_PYTHON_CLIENT_ALLOCATOR=platform` (set by the manifest), every XLA buffer is its
own device allocation, so the kept logits are individual allocations.

Truth: leak. The logits are produced at the line with the leak marker (the jitted call) and held by
the global list `all_logits`.
"""

import sys

import jax
import jax.numpy as jnp

all_logits = []


def init(key, d_in=1024, d_hidden=2048, n_cls=2048):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (d_in, d_hidden), jnp.float32) * 0.02,
        "w2": jax.random.normal(k2, (d_hidden, n_cls), jnp.float32) * 0.02,
    }


@jax.jit
def predict(params, x):
    h = jax.nn.relu(x @ params["w1"])
    return h @ params["w2"]


def main() -> int:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    key = jax.random.PRNGKey(0)
    params = init(key)
    correct = 0
    for _i in range(batches):
        key, kx, ky = jax.random.split(key, 3)
        x = jax.random.normal(kx, (512, 1024), jnp.float32)
        y = jax.random.randint(ky, (512,), 0, 2048)
        logits = predict(params, x)  # @leak
        all_logits.append(logits)
        correct += int((logits.argmax(-1) == y).sum())
    total = sum(a.nbytes for a in all_logits)
    print(
        f"evaluated {batches} batches, acc {correct / (512 * batches):.4f}; kept "
        f"{len(all_logits)} logits arrays, {total / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
