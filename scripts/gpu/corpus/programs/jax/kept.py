"""Leak: JAX arrays kept in a module-level list (each step's 4 MiB activation), with the
platform allocator (XLA_PYTHON_CLIENT_ALLOCATOR=platform: one allocation per buffer).

Usage: kept.py fast|slow   (fast: 60 steps back to back; slow: 80 ms apart)"""

import sys
import time

import jax
import jax.numpy as jnp

SLOW = sys.argv[1] == "slow"


@jax.jit
def layer(x, w):
    return jnp.tanh(x @ w)


key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (1024, 1024), dtype=jnp.float32)
x = jax.random.normal(key, (1024, 1024), dtype=jnp.float32)
kept = []
for step in range(60):
    act = layer(x + step, w)  # @leak
    kept.append(act)
    if SLOW:
        time.sleep(0.08)
jax.block_until_ready(kept)
print("kept", len(kept))
