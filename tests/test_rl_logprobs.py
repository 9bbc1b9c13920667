"""Chunked log-probs and entropy against the naive full-logits computation, values and grads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _rl_helpers import tiny_cfg, tiny_params
from ragjax.models.decoder import Decoder
from ragjax.rl.logprobs import chunked_logprobs, full_logprobs, sequence_logprobs


@pytest.mark.parametrize("chunk", [100, 128, 512, 1000])
def test_chunked_matches_full(chunk):
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
  h = jax.random.normal(k1, (2, 5, 16))
  w = jax.random.normal(k2, (16, 512)) * 0.5
  y = jax.random.randint(k3, (2, 5), 0, 512)
  lp, ent = chunked_logprobs(h, w, y, chunk=chunk)
  lp_ref, ent_ref = full_logprobs(h, w, y)
  np.testing.assert_allclose(lp, lp_ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ent, ent_ref, rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(ent) > 0)

  def loss(fn, h, w):
    a, b = fn(h, w)
    return (a * jnp.arange(10.0).reshape(2, 5)).sum() + 0.3 * b.sum()
  g = jax.jit(jax.grad(lambda h, w: loss(lambda h, w: chunked_logprobs(h, w, y, chunk=chunk),
                                         h, w), argnums=(0, 1)))(h, w)
  g_ref = jax.jit(jax.grad(lambda h, w: loss(lambda h, w: full_logprobs(h, w, y), h, w),
                           argnums=(0, 1)))(h, w)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_sequence_logprobs_match_decoder_logits():
  cfg, params = tiny_cfg(), tiny_params()
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 9), 0, cfg.vocab_size)
  lp, ent = sequence_logprobs(cfg, params, tokens, chunk=96)
  logits, _ = Decoder(cfg).apply({"params": params}, tokens)
  full = jax.nn.log_softmax(logits, -1)
  want = jnp.take_along_axis(full[:, :-1], tokens[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(lp[:, 1:], want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ent[:, 1:], -(jnp.exp(full) * full).sum(-1)[:, :-1], rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(lp[:, 0]) == 0)


def test_chunked_never_builds_full_logits():
  """The jaxpr of the chunked path holds no [B, T, V] array (forward or backward)."""
  h = jnp.zeros((2, 8, 24))
  w = jnp.zeros((24, 4096))
  y = jnp.zeros((2, 8), jnp.int32)
  jaxpr = jax.make_jaxpr(jax.grad(lambda h, w: chunked_logprobs(h, w, y, chunk=512)[0].sum(),
                                  argnums=(0, 1)))(h, w)
  shapes = set()

  def walk(jp):
    for eqn in jp.eqns:
      for v in eqn.outvars:
        shapes.add(tuple(getattr(v.aval, "shape", ())))
      for p in eqn.params.values():
        for sub in (p if isinstance(p, (list, tuple)) else [p]):
          if hasattr(sub, "jaxpr"):
            walk(sub.jaxpr if hasattr(sub.jaxpr, "eqns") else sub.jaxpr.jaxpr)
  walk(jaxpr.jaxpr)
  assert (16, 512) in shapes                          # chunks of the 2 x 8 tokens exist
  assert not any(s[-1:] == (4096,) and s[:1] in ((2,), (16,)) for s in shapes)
