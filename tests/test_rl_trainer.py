"""The trainer loop end to end on the tiny preset: PPO with a critic, keep-best on dev, JSONL +
TensorBoard logs, the NaN/Inf guard; and SFT through the same step machinery."""

import glob
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from _rl_helpers import tiny_cfg, tiny_params
from ragjax.rl._resume_probe import build_trainer
from ragjax.rl.batch import LABELS
from ragjax.rl.logprobs import full_logprobs
from ragjax.rl.rewards import register_reward
from ragjax.rl.sft import make_sft_batch, sft_loss_fn
from ragjax.rl.train_step import init_train_state, make_update
from ragjax.rl.trainer import NonFiniteError

_CALLS = {"n": 0}


@register_reward("test_nan_after_first_step")
def nan_after_first_step(response, golden, metadata):
  _CALLS["n"] += 1
  return 0.5 if _CALLS["n"] <= 8 else float("nan")    # 8 trajectories per step


def test_ppo_loop_logs_keeps_best_and_updates_critic(tmp_path):
  trainer = build_trainer(str(tmp_path), 2, ["rl.advantage='gae'", "rl.group_size=4",
                                             "trainer.save_every=2"])
  critic0 = jax.device_get(trainer.critic.params)
  hist = trainer.train()
  assert [h["step"] for h in hist] == [1, 2]
  for key in ("reward", "em", "f1", "response_length", "searches_per_traj", "entropy", "kl",
              "clip_frac", "critic/value_loss", "time/rollout_s", "time/retrieval_s",
              "time/update_s", "tokens_per_s"):
    assert key in hist[-1] and math.isfinite(hist[-1][key]), key
  assert hist[-1]["response_length"] == 10 and hist[-1]["searches_per_traj"] == 1
  head = np.asarray(trainer.critic.params["value_head"]["kernel"])
  assert np.abs(head - np.asarray(critic0["value_head"]["kernel"])).max() > 0
  rows = [json.loads(l) for l in open(os.path.join(tmp_path, "metrics.jsonl"))]
  assert [r["step"] for r in rows] == [1, 2] and "dev/em" in rows[1]
  assert glob.glob(os.path.join(tmp_path, "tb", "events.out.tfevents.*"))
  assert trainer.ckpt.latest_step() == 2 and trainer.ckpt.best_step() == 2
  best, meta = trainer.ckpt.restore_best(trainer.state.params)
  assert "dev/em" in meta["metrics"]
  np.testing.assert_array_equal(best["norm"]["scale"], trainer.state.params["norm"]["scale"])


def test_nan_guard_stops_and_keeps_last_good_checkpoint(tmp_path):
  _CALLS["n"] = 0
  trainer = build_trainer(str(tmp_path), 3, ["rl.rewards={'test_nan_after_first_step': 1.0}",
                                             "trainer.eval_every=0"])
  with pytest.raises(NonFiniteError, match=r"non-finite .* step 2 .* Last good checkpoint: step 1"):
    trainer.train()
  assert trainer.ckpt.latest_step() == 1


def test_sft_matches_reference_nll_and_learns():
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, cfg.vocab_size, (4, 12)).astype(np.int32)
  labels = np.full((4, 12), LABELS["policy"])
  labels[:, :3] = LABELS["prompt"]
  labels[:, 6:8] = LABELS["retrieved"]
  labels[3, 10:] = LABELS["padding"]
  batch = make_sft_batch(tokens, labels)
  loss_fn, denom = sft_loss_fn(cfg, chunk=100)
  # reference: full logits, naive masked mean over trained tokens
  from ragjax.models.decoder import Decoder
  hidden, _ = Decoder(cfg).apply({"params": params}, batch.tokens, batch.positions,
                                 batch.attention_mask, return_hidden=True)
  lp, _ = full_logprobs(hidden[:, :-1], params["embed_tokens"]["embedding"].T, batch.tokens[:, 1:])
  m = np.asarray(batch.loss_mask)[:, 1:]
  want = -(np.asarray(lp) * m).sum() / m.sum()
  got, _ = loss_fn(params, batch, denom(batch))
  assert float(got) == pytest.approx(want, rel=1e-5)
  assert m.sum() == 4 * 7 - 2      # 7 policy tokens a row; prompt, retrieved, padding excluded
  opt = optax.adam(1e-2)
  step = jax.jit(make_update(loss_fn, denom, opt, num_micro=2))
  state = init_train_state(params, opt)
  losses = []
  for _ in range(15):
    state, metrics = step(state, batch)
    losses.append(float(metrics["nll"]))
  assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_sft_gathered_loss_equals_dense_loss_and_grads(agg):
  """Projecting only the trained positions gives the same loss and gradients."""
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(1)
  tokens = rng.integers(1, cfg.vocab_size, (4, 20)).astype(np.int32)
  labels = np.full((4, 20), LABELS["retrieved"])
  labels[:, :4] = LABELS["prompt"]
  labels[0, 5:9] = labels[1, 12:19] = labels[2, 4:6] = LABELS["policy"]
  labels[3, 15:] = LABELS["padding"]          # row 3 trains on nothing
  dense, gathered = make_sft_batch(tokens, labels), make_sft_batch(tokens, labels, gather=True)
  assert gathered.loss_index.shape == (4, 16)   # longest row trains on 7 -> bucket 16
  assert float(gathered.loss_weight.sum()) == float(dense.loss_mask.sum()) == 13
  loss_fn, denom = sft_loss_fn(cfg, agg=agg, chunk=100)
  grad = jax.value_and_grad(loss_fn, has_aux=True)
  (l_d, _), g_d = grad(params, dense, denom(dense))
  (l_g, _), g_g = grad(params, gathered, denom(gathered))
  assert float(l_g) == pytest.approx(float(l_d), rel=1e-5)
  for a, b in zip(jax.tree.leaves(g_d), jax.tree.leaves(g_g)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)
  # and through micro-batches (rows split, gathered arrays split with them)
  opt = optax.sgd(0.1)
  s_d, _ = jax.jit(make_update(loss_fn, denom, opt, 1))(init_train_state(params, opt), dense)
  s_g, _ = jax.jit(make_update(loss_fn, denom, opt, 2))(init_train_state(params, opt), gathered)
  for a, b in zip(jax.tree.leaves(s_d.params), jax.tree.leaves(s_g.params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_sft_context_auxiliary_is_the_policy_nll_plus_weighted_context_nll():
  """context=True: loss = NLL over policy tokens + w * mean NLL over the other real tokens
  (prompt and documents), checked against full logits; padding and position 0 never count."""
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(2)
  tokens = rng.integers(1, cfg.vocab_size, (3, 14)).astype(np.int32)
  labels = np.full((3, 14), LABELS["retrieved"])
  labels[:, :3] = LABELS["prompt"]
  labels[:, 8:11] = LABELS["policy"]
  labels[2, 12:] = LABELS["padding"]
  batch = make_sft_batch(tokens, labels, context=True)
  ctx = np.asarray(batch.context_mask)
  assert ctx[:, 0].sum() == 0 and ctx[2, 12:].sum() == 0 and ctx[:, 8:11].sum() == 0
  assert ctx.sum() == 3 * 10 - 2
  loss_fn, denom = sft_loss_fn(cfg, chunk=100, context_weight=0.5)
  from ragjax.models.decoder import Decoder
  hidden, _ = Decoder(cfg).apply({"params": params}, batch.tokens, batch.positions,
                                 batch.attention_mask, return_hidden=True)
  lp, _ = full_logprobs(hidden[:, :-1], params["embed_tokens"]["embedding"].T, batch.tokens[:, 1:])
  lp = np.asarray(lp)
  pol = np.asarray(batch.loss_mask)[:, 1:]
  want_pol = -(lp * pol).sum() / pol.sum()
  want_ctx = -(lp * ctx[:, 1:]).sum() / ctx[:, 1:].sum()
  got, metrics = loss_fn(params, batch, denom(batch))
  assert float(metrics["nll"]) == pytest.approx(want_pol, rel=1e-5)
  assert float(metrics["context_nll"]) == pytest.approx(want_ctx, rel=1e-5)
  assert float(got) == pytest.approx(want_pol + 0.5 * want_ctx, rel=1e-5)
