"""The jitted update: micro-batch accumulation = full batch; sharded (8 fake CPUs) = unsharded;
retrieved tokens cannot move the params."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from _rl_helpers import random_rl_batch, tiny_cfg, tiny_params
from ragjax.parallel.mesh import make_mesh
from ragjax.rl.batch import make_train_batch, rows_with_gradient
from ragjax.rollout.labels import Source
from ragjax.rl.run_config import OptimConfig, RLConfig
from ragjax.rl.optim import make_optimizer
from ragjax.rl.train_step import (batch_shardings, init_train_state, jit_update, make_update,
                                  policy_loss_fn, shard_train_state)

RL = RLConfig(kl_coef=0.01, entropy_coef=0.01, clip_high=0.28, logprob_chunk=200)
ADAM = OptimConfig(lr=1e-2, warmup_steps=1, schedule="cosine", total_steps=10)


def _optimizer(kind):
  # Equality tests use SGD: Adam divides by sqrt(v), which turns 1e-8 float reordering of a
  # near-zero gradient into a visible param difference and would hide real mismatches.
  return make_optimizer(ADAM) if kind == "adam" else optax.sgd(0.5)


@functools.lru_cache(maxsize=None)
def _run(kind="sgd", num_micro=1, sharded=False, steps=2):
  cfg, params = tiny_cfg(), tiny_params()
  batch = random_rl_batch(cfg, params)
  p0 = jax.device_get(params)  # the update donates its state
  opt = _optimizer(kind)
  state = init_train_state(params, opt)
  loss_fn, denom = policy_loss_fn(cfg, RL)
  update = make_update(loss_fn, denom, opt, num_micro)
  mesh = make_mesh(data=2, fsdp=2, tensor=2) if sharded else None
  if mesh is not None:
    state = shard_train_state(state, cfg, mesh, opt)
    batch = jax.device_put(batch, batch_shardings(batch, mesh))
  step = jit_update(update, state, batch, mesh)
  metrics = []
  for _ in range(steps):
    state, m = step(state, batch)
    metrics.append(jax.device_get(m))
  shardings = jax.tree.map(lambda x: x.sharding, state)
  return jax.device_get(state), metrics, p0, shardings


def _close(a, b, tol=1e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def test_update_moves_params_and_reports_metrics():
  state, metrics, p0, _ = _run("adam")   # step 0 has lr 0 (one warmup step), step 1 moves
  assert int(state.step) == 2
  moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in
           zip(jax.tree.leaves(state.params), jax.tree.leaves(p0))]
  assert min(moved) > 0
  m = metrics[1]
  for k in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "grad_norm"):
    assert np.isfinite(m[k]), k
  assert m["entropy"] > 1.0 and m["kl"] > 0


def test_micro_batches_equal_full_batch():
  full, mf, p0, _ = _run("sgd", 1)
  micro, mm, _, _ = _run("sgd", 4)
  assert max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in
             zip(jax.tree.leaves(full.params), jax.tree.leaves(p0))) > 1e-3
  _close(full.params, micro.params)
  for k in ("loss", "pg_loss", "kl", "entropy", "grad_norm"):
    np.testing.assert_allclose(mf[-1][k], mm[-1][k], rtol=1e-5, atol=1e-6)


def test_sharded_equals_unsharded_on_8_devices():
  assert jax.device_count() == 8
  ref, mr, _, _ = _run("sgd", 1)
  got, mg, _, sh = _run("sgd", 2, sharded=True)
  _close(ref.params, got.params)
  # The loss is a small difference (about 4e-3), so float32 reduction order alone moves it
  # by ~1e-5 relative: the absolute bound says what float32 promises here.
  np.testing.assert_allclose(mr[-1]["loss"], mg[-1]["loss"], rtol=1e-5, atol=1e-7)
  # the params really are split: embedding [V, E] over tensor x fsdp
  emb = sh.params["embed_tokens"]["embedding"]
  assert len(emb.device_set) == 8 and not emb.is_fully_replicated


def test_sharded_adam_state_matches_and_follows_param_sharding():
  ref, _, _, _ = _run("adam", 1, steps=1)
  got, _, _, sh = _run("adam", 2, sharded=True, steps=1)
  _close(ref.opt_state, got.opt_state)          # mu, nu = f(grads) after one step
  mu = sh.opt_state[1][0].mu["embed_tokens"]["embedding"]
  assert mu == sh.params["embed_tokens"]["embedding"]


def test_retrieved_tokens_do_not_change_param_gradients():
  cfg, params = tiny_cfg(), tiny_params()
  batch = random_rl_batch(cfg, params)
  retrieved = (np.asarray(batch.loss_mask) == 0) & (np.asarray(batch.attention_mask) == 1)
  assert retrieved.sum() > 8
  noise = jnp.asarray(np.where(retrieved, 5.0, 0.0), jnp.float32)
  poisoned = dataclasses.replace(batch, advantages=batch.advantages + noise,
                                 old_logprobs=batch.old_logprobs - noise,
                                 ref_logprobs=batch.ref_logprobs + noise)
  loss_fn, denom = policy_loss_fn(cfg, RL)
  g = jax.jit(jax.grad(lambda p, b: loss_fn(p, b, denom(b))[0]))
  ga, gb = g(params, batch), g(params, poisoned)
  for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _sparse_batch(cfg, params, gather, seed=1):
  """A batch like the world recipe's: long prompt and documents, a few policy tokens."""
  rng = np.random.default_rng(seed)
  b, t = 8, 64
  labels = np.full((b, t), Source.PAD, np.int32)
  for i in range(b):
    end = int(rng.integers(48, t + 1))
    labels[i, :10] = Source.PROMPT
    labels[i, 10:18 + i % 3] = Source.POLICY
    labels[i, 18 + i % 3:42] = Source.RETRIEVED
    labels[i, 42:end] = Source.POLICY
  tokens = rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32)
  old = rng.normal(-3, 0.5, (b, t)).astype(np.float32)
  ref = old + rng.normal(0, 0.1, (b, t)).astype(np.float32)
  adv = rng.normal(0, 1, (b,)).astype(np.float32)
  return make_train_batch(tokens, labels, adv, old, ref_logprobs=ref, gather=gather)


def test_gathered_policy_loss_equals_full_loss():
  """rl.gather projects only the trained positions: same loss, metrics and gradients, in each
  aggregation mode, at a sampling temperature, and with micro-batches."""
  cfg, params = tiny_cfg(), tiny_params()
  full, gath = _sparse_batch(cfg, params, False), _sparse_batch(cfg, params, True)
  assert gath.loss_index.shape == (8, 32) and full.loss_index is None
  for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
    rl = dataclasses.replace(RL, loss_agg=agg, temperature=0.7)
    loss_fn, denom = policy_loss_fn(cfg, rl)
    vg = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(p, b, denom(b)), has_aux=True))
    (la, ma), ga = vg(params, full)
    (lb, mb), gb = vg(params, gath)
    np.testing.assert_allclose(float(la), float(lb), rtol=1e-5, atol=1e-6)
    for k in ma:
      np.testing.assert_allclose(float(ma[k]), float(mb[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    _close(ga, gb, tol=1e-5)
    assert float(jnp.abs(jax.tree.leaves(ga)[0]).max()) > 0
  loss_fn, denom = policy_loss_fn(cfg, RL)
  states = []
  for batch, micro in ((full, 1), (gath, 4)):
    opt = optax.sgd(0.5)
    update = make_update(loss_fn, denom, opt, micro)
    state = init_train_state(jax.tree.map(jnp.copy, params), opt)
    states.append(jax.device_get(jax.jit(update)(state, batch)[0].params))
  _close(states[0], states[1], tol=1e-5)


def test_micro_batch_token_means_accumulate_to_the_full_batch_update():
  """token-mean-per-micro-batch (verl): its per-row normalisers travel with their rows, so four
  strided micro-batches give the update of one full batch, and the loss differs from the flat
  token mean on a batch of uneven rows."""
  cfg, params = tiny_cfg(), tiny_params()
  batch = random_rl_batch(cfg, params)
  rl = dataclasses.replace(RL, loss_agg="token-mean-per-micro-batch", loss_agg_rows=2)
  loss_fn, denom = policy_loss_fn(cfg, rl)
  flat_fn, flat_denom = policy_loss_fn(cfg, RL)
  assert abs(float(loss_fn(params, batch, denom(batch))[0])
             - float(flat_fn(params, batch, flat_denom(batch))[0])) > 1e-4
  states = []
  for micro in (1, 4):
    opt = optax.sgd(0.5)
    state = init_train_state(jax.tree.map(jnp.copy, params), opt)
    states.append(jax.device_get(jax.jit(make_update(loss_fn, denom, opt, micro))(state, batch)[0]
                                 .params))
  _close(states[0], states[1], tol=1e-5)



@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_rows_without_advantage_leave_the_update_with_the_same_loss_and_gradient(agg):
  """rl.skip_zero_advantage_rows: rows 0, 3 and 7 carry an advantage; the update of those rows
  (padded to 4, on the whole batch's normalisers) moves the params as the whole batch's does,
  with its loss, and the kept rows' diagnostics rescaled are their own token means."""
  cfg, params = tiny_cfg(), tiny_params()
  batch = random_rl_batch(cfg, params, with_ref=False)
  live = np.array([0, 3, 7])
  batch = batch.replace(advantages=jnp.where(jnp.isin(jnp.arange(8), live)[:, None],
                                             batch.advantages, 0.0))
  rl = dataclasses.replace(RL, kl_coef=0.0, entropy_coef=0.0, loss_agg=agg,
                           skip_zero_advantage_rows=True)
  loss_fn, denom = policy_loss_fn(cfg, rl)
  kept, factor = rows_with_gradient(batch, agg, unit=2)
  assert kept.tokens.shape[0] == 4 and kept.denominator.shape == (4,)
  np.testing.assert_array_equal(np.asarray(kept.tokens[:3]), np.asarray(batch.tokens[live]))
  assert float(jnp.abs(kept.loss_mask[3]).sum()) == 0          # the padding trains on nothing
  out = {}
  for name, b, micro in (("whole", batch, 2), ("kept", kept, 2)):
    opt = optax.sgd(0.5)
    state = init_train_state(jax.tree.map(jnp.copy, params), opt)
    s, m = jax.jit(make_update(loss_fn, denom, opt, micro))(state, b)
    out[name] = (jax.device_get(s.params), jax.device_get(m))
  _close(out["whole"][0], out["kept"][0], tol=1e-6)
  for k in ("loss", "pg_loss", "grad_norm"):
    assert out["kept"][1][k] == pytest.approx(out["whole"][1][k], rel=1e-5, abs=1e-7), k
  # the live rows alone, on their own normalisers: the diagnostics the trainer reports
  alone = jax.tree.map(lambda x: None if x is None else x[live], batch)
  _, m_alone = loss_fn(params, alone, denom(alone))
  for k in ("entropy", "ratio", "approx_kl_old"):
    assert float(out["kept"][1][k]) * factor == pytest.approx(float(m_alone[k]), rel=1e-5), k
  # nothing to train: one row that trains on nothing stands in (the optimiser still steps)
  idle = batch.replace(advantages=jnp.zeros_like(batch.advantages))
  none, _ = rows_with_gradient(idle, agg, unit=2)
  assert none.tokens.shape[0] == 2 and float(none.loss_mask.sum()) == 0
  # nothing to cut: the batch itself
  same, f = rows_with_gradient(batch.replace(advantages=batch.advantages + 1.0), agg, unit=2)
  assert same is not None and same.denominator is None and f == 1.0


def test_skipping_rows_is_refused_where_a_zero_advantage_row_still_has_a_gradient():
  for kwargs, name in ((dict(kl_coef=0.01), "kl_coef"), (dict(entropy_coef=0.01), "entropy_coef"),
                       (dict(advantage="gae"), "advantage"),
                       (dict(loss_agg="token-mean-per-micro-batch", loss_agg_rows=2), "loss_agg")):
    base = dict(kl_coef=0.0, entropy_coef=0.0)
    with pytest.raises(ValueError, match=f"rl.skip_zero_advantage_rows: .*rl.{name}="):
      RLConfig(**{**base, **kwargs}, skip_zero_advantage_rows=True)
  RLConfig(kl_coef=0.01, kl_in_reward=True, entropy_coef=0.0, skip_zero_advantage_rows=True)
