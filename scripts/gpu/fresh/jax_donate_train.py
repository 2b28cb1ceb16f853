"""Negative: a JAX training loop whose buffers churn every step but whose live memory stays
flat (params and Adam-style state replaced each step, donated to the jitted step).

Mechanism, from public reports: users watch allocations in a Python training loop and
suspect that JAX leaks arrays created in the loop; the arrays are freed when their last
reference goes, and buffer donation lets XLA reuse the old params' memory for the new ones.
Sources: jax-ml/jax issue #19429 ("Memory leak when allocating arrays in a for loop"; the
device side is freed), #10007 (live buffers in a loop), and the JAX docs on buffer donation
(`donate_argnums`) for updating params in place.

With `XLA_PYTHON_CLIENT_ALLOCATOR=platform` (set by the manifest) every buffer is its own
device allocation and is freed as soon as it is dead: many allocations and frees per step,
a constant number live. The loss history is kept as Python floats.

Truth: no leak.
"""

import sys

import jax
import jax.numpy as jnp


def init(key, d=1024):
    ks = jax.random.split(key, 3)
    params = {f"w{i}": jax.random.normal(k, (d, d), jnp.float32) * 0.02 for i, k in enumerate(ks)}
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return params, (zeros, jax.tree_util.tree_map(jnp.zeros_like, params))


def loss_fn(params, x, y):
    h = x
    for i in range(3):
        h = jnp.tanh(h @ params[f"w{i}"])
    return jnp.mean((h - y) ** 2)


def _step(params, opt, x, y, lr=1e-3, b1=0.9, b2=0.999):
    loss, g = jax.value_and_grad(loss_fn)(params, x, y)
    m, v = opt
    m = jax.tree_util.tree_map(lambda a, b: b1 * a + (1 - b1) * b, m, g)
    v = jax.tree_util.tree_map(lambda a, b: b2 * a + (1 - b2) * b * b, v, g)
    params = jax.tree_util.tree_map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + 1e-8), params, m, v)
    return params, (m, v), loss


step = jax.jit(_step, donate_argnums=(0, 1))


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    key = jax.random.PRNGKey(0)
    params, opt = init(key)
    history = []
    for i in range(steps):
        key, kx, ky = jax.random.split(key, 3)
        x = jax.random.normal(kx, (256, 1024), jnp.float32)
        y = jax.random.normal(ky, (256, 1024), jnp.float32)
        params, opt, loss = step(params, opt, x, y)
        history.append(float(loss))
        if i % 100 == 0:
            print(f"step {i}: loss {history[-1]:.5f}, live arrays {len(jax.live_arrays())}")
    print(f"done {steps} steps, final loss {history[-1]:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
