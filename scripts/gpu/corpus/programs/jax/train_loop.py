"""Negative: a jitted SGD loop on a small MLP whose parameters are replaced every step (the old
ones freed); memory is flat. Run with JAX's default preallocating allocator (a small fraction
of the GPU, XLA_PYTHON_CLIENT_MEM_FRACTION) or with the platform allocator.

Usage: train_loop.py STEPS"""

import sys

import jax
import jax.numpy as jnp

STEPS = int(sys.argv[1])


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (512, 1024)) * 0.02, "w2": jax.random.normal(k2, (1024, 10)) * 0.02}


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    logits = h @ params["w2"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


key = jax.random.PRNGKey(0)
params = init(key)
losses = []
for i in range(STEPS):
    key, kx, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (256, 512))
    y = jax.random.randint(ky, (256,), 0, 10)
    params, loss = step(params, x, y)
    if i % 20 == 0:
        losses.append(float(loss))
print(STEPS, "steps, loss", losses[0], "->", float(loss))
