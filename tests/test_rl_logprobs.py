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


def test_sampler_logprobs_stand_in_except_on_rows_trained_on_tokens_the_sampler_did_not_draw():
  """`rl.use_sampler_logprobs` with rows that train on inserted tokens (REX-RAG's clones):
  those rows, and only they, get log pi_old from a forward; the others keep the sampler's."""
  from _rl_helpers import random_labels
  from ragjax.rl.masks import loss_mask, unsampled_rows
  from ragjax.rl.run_config import RLConfig
  from ragjax.rl.step_batch import StepBatch
  from ragjax.rl.trainer import Trainer
  from ragjax.rollout.labels import Source
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(3)
  b, t = 5, 16
  tokens = rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32)
  labels = random_labels(rng, b, t)
  labels[1, 6:8] = labels[4, 5:7] = Source.INJECTED         # two clones' inserted prompts
  train_on = ("policy", "injected")
  loss = loss_mask(labels, train_on)
  assert unsampled_rows(labels, loss) == [1, 4]
  assert unsampled_rows(labels, loss_mask(labels, ("policy",))) == []
  attn = (labels != Source.PAD).astype(np.int32)
  pos = np.maximum(np.cumsum(attn, 1) - 1, 0)
  sampler = rng.normal(-2.0, 0.5, (b, t)).astype(np.float32)
  sb = StepBatch(rollout=None, results=[], rewards=np.zeros(b, np.float32), tokens=tokens,
                 labels=labels, loss_mask=loss, attention_mask=attn, positions=pos,
                 group_id=np.zeros(b, np.int32), sampler_logprobs=sampler, step_rewards=[],
                 step_ends=[])
  trainer = object.__new__(Trainer)          # only what scoring a batch reads
  trainer.rl = RLConfig(train_on=train_on, use_sampler_logprobs=True)
  trainer.ref_params, trainer.cfg = None, cfg
  trainer._score = jax.jit(lambda p, t, q, a: sequence_logprobs(cfg, p, t, q, a))
  trainer.policy_params = lambda: params
  trainer._device = jnp.asarray
  old = trainer._score_batch(sb).old_logprobs
  full = np.asarray(trainer._score(params, jnp.asarray(tokens), jnp.asarray(pos),
                                   jnp.asarray(attn))[0])
  np.testing.assert_array_equal(old[[0, 2, 3]], sampler[[0, 2, 3]])
  np.testing.assert_allclose(old[[1, 4]], full[[1, 4]], atol=1e-5, rtol=0)
  assert not np.allclose(old[1], sampler[1])
