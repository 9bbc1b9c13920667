"""Losses against hand-computed numbers, and the gradient at retrieved tokens is exactly zero."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.rl.batch import make_train_batch
from ragjax.rollout.labels import Source
from ragjax.rl.run_config import RLConfig
from ragjax.rl.losses import (AGG_MODES, agg_denominator, aggregate, clipped_surrogate,
                              clipped_value_loss, kl_penalty)
from ragjax.rl.train_step import policy_objective

RATIOS = np.array([1.5, 0.5, 1.1, 0.7, 5.0])
ADV = jnp.array([1.0, 1.0, -1.0, -1.0, -1.0])
OLD = jnp.zeros(5)
LOGP = jnp.log(jnp.asarray(RATIOS))


def test_clipped_surrogate_asymmetric_clip():
  loss, clipped = clipped_surrogate(LOGP, OLD, ADV, clip_low=0.2, clip_high=0.28)
  # t0: max(-1.5, -1.28) = -1.28 clipped; t1: max(-0.5, -0.8) = -0.5; t2: 1.1;
  # t3: max(0.7, 0.8) = 0.8 clipped; t4: max(5, 1.28) = 5
  np.testing.assert_allclose(loss, [-1.28, -0.5, 1.1, 0.8, 5.0], rtol=1e-6)
  np.testing.assert_array_equal(clipped, [1, 0, 0, 1, 0])


def test_dual_clip_caps_negative_advantage_loss():
  loss, clipped = clipped_surrogate(LOGP, OLD, ADV, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
  np.testing.assert_allclose(loss, [-1.28, -0.5, 1.1, 0.8, 3.0], rtol=1e-6)
  assert clipped[4] == 1
  with pytest.raises(ValueError, match="dual_clip must be > 1"):
    clipped_surrogate(LOGP, OLD, ADV, clip_low=0.2, clip_high=0.2, dual_clip=1.0)


def test_no_clip_is_the_plain_ratio_and_reaches_the_objective():
  """`rl.clip_ratio=False` (UR²'s paper: no clipping): -A x ratio on every token."""
  loss, clipped = clipped_surrogate(LOGP, OLD, ADV, clip_low=0.2, clip_high=0.28, clip=False)
  np.testing.assert_allclose(loss, [-1.5, -0.5, 1.1, 0.7, 5.0], rtol=1e-6)
  assert not np.asarray(clipped).any()
  batch = _batch_with_retrieval()
  logp = batch.old_logprobs + 0.5 * jnp.sin(jnp.arange(20.0).reshape(2, 10))   # ratios far from 1
  ent = jnp.zeros((2, 10))
  on = policy_objective(RLConfig(kl_coef=0.0), logp, ent, batch, None)[1]
  off = policy_objective(RLConfig(kl_coef=0.0, clip_ratio=False), logp, ent, batch, None)[1]
  assert float(on["clip_frac"]) > 0 and float(off["clip_frac"]) == 0.0
  assert float(off["pg_loss"]) < float(on["pg_loss"])      # the clip only ever raises the loss


def test_aggregation_modes():
  x = jnp.array([[1.0, 2, 5], [4, 7, 7], [9, 9, 9]])
  m = jnp.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
  assert aggregate(x, m, "token-mean") == pytest.approx(7 / 3)
  assert aggregate(x, m, "seq-mean-token-mean") == pytest.approx((1.5 + 4) / 2)
  assert aggregate(x, m, "seq-mean-token-sum") == pytest.approx((3 + 4) / 2)
  with pytest.raises(ValueError, match="unknown loss aggregation 'mean'"):
    aggregate(x, m, "mean")


def test_the_three_authors_aggregations_differ_on_one_batch_as_computed_by_hand():
  """Rows with 1, 3, 3 and 2 trained tokens (sums 2, 3, 6, 12):
  token-mean (one mean over the update) = 23 / 9;
  seq-mean-token-mean (OpenRLHF) = (2/1 + 3/3 + 6/3 + 12/2) / 4 = 11 / 4;
  token-mean-per-micro-batch of 2 rows (verl) = ((2+3)/4 + (6+12)/5) / 2 = 2.425.
  Split into strided micro-batches with their rows' normalisers, the parts sum to the whole."""
  x = jnp.array([[2.0, 9, 9], [1, 1, 1], [4, 0, 2], [6, 6, 9]])
  m = jnp.array([[1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
  token = float(aggregate(x, m, "token-mean"))
  seq = float(aggregate(x, m, "seq-mean-token-mean"))
  micro = float(aggregate(x, m, "token-mean-per-micro-batch", rows=2))
  assert token == pytest.approx(23 / 9)
  assert seq == pytest.approx(11 / 4)
  assert micro == pytest.approx((5 / 4 + 18 / 5) / 2)
  assert len({round(v, 6) for v in (token, seq, micro)}) == 3
  # one row per micro-batch is the sequence mean; the whole batch as one is the token mean
  assert float(aggregate(x, m, "token-mean-per-micro-batch", rows=1)) == pytest.approx(seq)
  assert float(aggregate(x, m, "token-mean-per-micro-batch", rows=4)) == pytest.approx(token)
  # a micro-batch with no trained token counts for nothing (rows 0-1 emptied: (6+12)/5)
  empty = m.at[:2].set(0)
  assert float(aggregate(x, empty, "token-mean-per-micro-batch", rows=2)) == pytest.approx(3.6)
  for mode in AGG_MODES:
    d = agg_denominator(m, mode, 2)
    parts = sum(float(aggregate(x[i::2], m[i::2], mode, d[i::2])) for i in range(2))
    assert parts == pytest.approx(float(aggregate(x, m, mode, rows=2)), rel=1e-6), mode
  with pytest.raises(ValueError, match="rows of a micro-batch"):
    aggregate(x, m, "token-mean-per-micro-batch")
  with pytest.raises(ValueError, match="rl.loss_agg_rows >= 1"):
    RLConfig(loss_agg="token-mean-per-micro-batch")
  with pytest.raises(ValueError, match="rl.critic_loss_agg='mean'"):
    RLConfig(critic_loss_agg="mean")


def test_kl_estimators():
  logp, ref = jnp.array([-1.0]), jnp.array([-2.0])     # log ratio 1
  assert kl_penalty(logp, ref, "k1")[0] == pytest.approx(1.0)
  assert kl_penalty(logp, ref, "k2")[0] == pytest.approx(0.5)
  assert kl_penalty(logp, ref, "k3")[0] == pytest.approx(math.exp(-1))
  # k3 clamps at 10 as verl's low_var_kl: e^20 - 20 - 1 -> 10
  assert kl_penalty(jnp.array([-21.0]), jnp.array([-1.0]), "k3")[0] == pytest.approx(10.0)
  with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
    kl_penalty(logp, ref, "k4")


def test_clipped_value_loss():
  loss, clipped = clipped_value_loss(jnp.array([1.0, 0.6]), jnp.array([0.5, 0.5]),
                                     jnp.array([2.0, 2.0]), 0.2)
  # row 0: max((1-2)^2, (0.7-2)^2)/2 = 0.845 (clipped); row 1: V inside the band -> (1.4)^2/2
  np.testing.assert_allclose(loss, [0.845, 0.98], rtol=1e-6)
  np.testing.assert_array_equal(clipped, [1, 0])


def _batch_with_retrieval():
  labels = np.array([
      [1, 1, 2, 2, 3, 3, 3, 2, 2, 0],        # prompt, policy, retrieved block, policy, pad
      [1, 2, 2, 3, 3, 2, 4, 4, 2, 2],        # ... plus injected probe tokens
  ])
  tokens = np.arange(20).reshape(2, 10) % 7
  rng = np.random.default_rng(0)
  old = rng.normal(-2, 0.3, (2, 10)).astype(np.float32)
  ref = rng.normal(-2, 0.3, (2, 10)).astype(np.float32)
  return make_train_batch(tokens, labels, np.array([1.0, -0.5]), old, ref_logprobs=ref,
                          train_on=("policy", "injected"))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                 "token-mean-per-micro-batch"])
@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_retrieved_tokens_get_exactly_zero_gradient(agg, kl):
  batch = _batch_with_retrieval()
  rl = RLConfig(loss_agg=agg, loss_agg_rows=1, kl_estimator=kl, kl_coef=0.1, entropy_coef=0.01,
                clip_high=0.28, dual_clip=3.0)
  logp = batch.old_logprobs + 0.3 * jnp.sin(jnp.arange(20.0).reshape(2, 10))
  ent = jnp.abs(jnp.cos(jnp.arange(20.0).reshape(2, 10)))

  def f(lp, en):
    return policy_objective(rl, lp, en, batch, None)[0]
  g_lp, g_ent = jax.grad(f, argnums=(0, 1))(logp, ent)
  retrieved = np.asarray(batch.tokens) * 0 + (np.array([
      [1, 1, 2, 2, 3, 3, 3, 2, 2, 0], [1, 2, 2, 3, 3, 2, 4, 4, 2, 2]]) == Source.RETRIEVED)
  assert retrieved.sum() == 5
  assert np.all(np.asarray(g_lp)[retrieved.astype(bool)] == 0.0)
  assert np.all(np.asarray(g_ent)[retrieved.astype(bool)] == 0.0)
  # trained tokens do get gradient (the test could fail if the mask were all zeros)
  trained = np.asarray(batch.loss_mask).astype(bool)
  assert np.count_nonzero(np.asarray(g_lp)[trained]) == trained.sum()


def test_loss_mask_trains_on_retrieved_only_when_asked_and_never_on_the_prompt():
  from ragjax.rollout.labels import Source
  labels = np.array([[Source.PROMPT, Source.POLICY, Source.RETRIEVED, Source.POLICY, Source.PAD]])
  default = make_train_batch(np.zeros((1, 5)), labels, np.ones(1), np.zeros((1, 5)))
  np.testing.assert_array_equal(np.asarray(default.loss_mask), [[0, 1, 0, 1, 0]])
  ablation = make_train_batch(np.zeros((1, 5)), labels, np.ones(1), np.zeros((1, 5)),
                              train_on=("policy", "retrieved"))
  np.testing.assert_array_equal(np.asarray(ablation.loss_mask), [[0, 1, 1, 1, 0]])
  with pytest.raises(ValueError, match="cannot train on 'prompt'"):
    make_train_batch(np.zeros((1, 3)), np.ones((1, 3)), np.zeros(1), np.zeros((1, 3)),
                     train_on=("policy", "prompt"))
  with pytest.raises(ValueError, match=r"advantages must be \[B\]=1"):
    make_train_batch(np.zeros((1, 3)), np.ones((1, 3)), np.zeros(4), np.zeros((1, 3)))
