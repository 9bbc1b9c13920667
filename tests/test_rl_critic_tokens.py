"""The PPO critic's tokens, the whitening mask and the value head's start, as each paper config
sets them: Search-R1's verl critic values, runs GAE over, whitens over and regresses on every
response token (retrieved documents included), R3-RAG's OpenRLHF critic on the policy's own;
the numbers are checked against a plain-numpy verl reference on a batch with retrieved tokens,
where the two masks give different numbers."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.rl.masks import masks as label_masks, response_mask
from ragjax.rl.run_config import parse_run_config
from ragjax.rl.step_batch import StepBatch, step_advantages, to_train_batch
from ragjax.rl.train_step import value_loss_fn
from ragjax.rollout.labels import Source
from ragjax.wiring.config_files import load_config

from _rl_helpers import tiny_cfg, tiny_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P, POL, RET, ENV, PAD = (int(Source.PROMPT), int(Source.POLICY), int(Source.RETRIEVED),
                         int(Source.ENV), int(Source.PAD))
# two rows: prompt | policy (a search) | wrapper + retrieved documents + wrapper | policy (answer)
LABELS = np.asarray([[P, P, POL, POL, ENV, RET, RET, RET, ENV, POL, POL, PAD],
                     [P, P, P, POL, ENV, RET, RET, ENV, POL, POL, POL, POL]], np.int32)
REWARDS = [1.0, 0.0]


def rl_of(spec):
  return parse_run_config(load_config(os.path.join(ROOT, "configs", spec))).rl


def step_batch(values):
  n, t = LABELS.shape
  m = label_masks(LABELS, ("policy",))
  return StepBatch(rollout=None, results=[], rewards=np.asarray(REWARDS, np.float32),
                   tokens=(np.arange(n * t).reshape(n, t) % 50 + 3).astype(np.int32),
                   labels=LABELS, loss_mask=m.loss, attention_mask=m.attention,
                   positions=m.positions, group_id=np.arange(n),
                   sampler_logprobs=np.zeros((n, t), np.float32),
                   step_rewards=[[r] for r in REWARDS], step_ends=[[], []],
                   old_logprobs=np.full((n, t), -1.0, np.float32), values=values)


def verl_reference(values, rewards_at, gamma, lam):
  """verl's compute_gae_advantage_return over the response (ray_trainer.py:126-137,
  core_algos.py:70-106), in numpy: the recursion over every response position, the returns
  advantages + values, the advantages whitened over the response's attention mask."""
  resp = ((LABELS != PAD) & (LABELS != P)).astype(np.float64)
  adv = np.zeros(LABELS.shape)
  for b in range(LABELS.shape[0]):
    idx = np.flatnonzero(resp[b])             # the response: contiguous, after the prompt
    last, next_v = 0.0, 0.0
    for t in idx[::-1]:
      r = REWARDS[b] if t == rewards_at[b] else 0.0
      delta = r + gamma * next_v - values[b, t]
      last = delta + gamma * lam * last
      adv[b, t], next_v = last, values[b, t]
  returns = (adv + values) * resp
  n = resp.sum()
  mean = (adv * resp).sum() / n
  var = (((adv - mean) ** 2) * resp).sum() / (n - 1)
  return (adv - mean) / np.sqrt(var + 1e-8) * resp, returns, resp


def test_search_r1_ppo_runs_gae_and_whitens_over_the_response_as_verl():
  rl = rl_of("search_r1.py:qwen2.5-3b-ppo")
  assert (rl.critic_mask, rl.adv_whiten_mask, rl.adv_whiten) == ("response", "response", "verl")
  values = np.random.default_rng(0).normal(0, 0.5, LABELS.shape).astype(np.float32)
  sb = step_batch(values)
  adv, ret = step_advantages(sb, rl)
  ref_adv, ref_ret, resp = verl_reference(values.astype(np.float64), [10, 11], rl.gamma, rl.lam)
  np.testing.assert_array_equal(response_mask(LABELS), resp)
  np.testing.assert_allclose(ret, ref_ret, atol=1e-5)
  np.testing.assert_allclose(adv * resp, ref_adv, atol=1e-5)
  tb = to_train_batch(sb, adv, rl, returns=ret)
  np.testing.assert_array_equal(np.asarray(tb.critic_mask), resp)
  np.testing.assert_allclose(np.asarray(tb.advantages), ref_adv * sb.loss_mask, atol=1e-5)
  # over the policy's tokens alone the whitening counts other tokens: other advantages
  own = dataclasses.replace(rl, critic_mask="loss", adv_whiten_mask="loss")
  adv_own, ret_own = step_advantages(sb, own)
  assert np.abs(adv_own - ref_adv * sb.loss_mask).max() > 0.05
  assert np.all(ret_own[LABELS == RET] == 0) and np.any(ret[LABELS == RET] != 0)
  assert to_train_batch(sb, adv_own, own, returns=ret_own).critic_mask is None


def test_the_value_loss_covers_the_critics_tokens():
  """seq-mean-token-mean (Search-R1's critic) of the clipped value loss over the response,
  by hand, against the jitted loss; over the loss mask it differs."""
  rl = rl_of("search_r1.py:qwen2.5-3b-ppo")
  cfg = tiny_cfg()
  critic = {**tiny_params(1)}
  critic["value_head"] = {"kernel": jax.random.normal(jax.random.PRNGKey(2),
                                                      (cfg.hidden_size, 1)) * 0.1,
                          "bias": jnp.zeros((1,))}
  rng = np.random.default_rng(1)
  old = rng.normal(0, 0.5, LABELS.shape).astype(np.float32)
  sb = step_batch(old)
  adv, ret = step_advantages(sb, rl)
  tb = to_train_batch(sb, adv, rl, returns=ret)
  loss_fn, denom = value_loss_fn(cfg, rl)
  ours = float(loss_fn(critic, tb, denom(tb))[0])
  from ragjax.rl.logprobs import sequence_values
  v = np.asarray(sequence_values(cfg, critic, tb.tokens, tb.positions, tb.attention_mask),
                 np.float64)

  def by_hand(mask):
    clipped = old + np.clip(v - old, -rl.value_clip, rl.value_clip)
    per = 0.5 * np.maximum((clipped - ret) ** 2, (v - ret) ** 2)
    return float(np.mean((per * mask).sum(1) / mask.sum(1)))

  assert ours == pytest.approx(by_hand(response_mask(LABELS)), rel=1e-5)
  assert abs(by_hand(sb.loss_mask) - ours) > 1e-3


def test_the_value_head_starts_as_each_authors_framework_draws_it():
  from ragjax.planning.plan import plan_rows
  from ragjax.wiring.components import init_critic
  cfg = tiny_cfg()
  params = tiny_params(0)
  for spec, kind, std in (("search_r1.py:qwen2.5-3b-ppo", "verl", 0.02),
                          ("r3_rag.py:qwen2.5-7b", "openrlhf", 1 / (cfg.hidden_size + 1)),
                          ("search_r1.py:tiny-ppo", "zeros", 0.0)):
    rl = rl_of(spec)
    assert rl.value_head_init == kind, spec
    critic = init_critic(cfg, params, head_init=rl.value_head_init)
    w = np.asarray(critic["value_head"]["kernel"])
    assert w.shape == (cfg.hidden_size, 1) and not np.asarray(critic["value_head"]["bias"]).any()
    assert np.std(w) == pytest.approx(std, rel=0.3, abs=1e-12), spec
    np.testing.assert_array_equal(critic["norm"]["scale"], params["norm"]["scale"])
  rows = {r.key: r for r in plan_rows(load_config(os.path.join(ROOT, "configs",
                                                               "search_r1.py:qwen2.5-3b-ppo")),
                                      os.path.join(ROOT, "configs", "search_r1.py"),
                                      "qwen2.5-3b-ppo")}
  assert rows["value_head_init"].ours == "verl: N(0, 0.02^2)" and rows["value_head_init"].agrees
  for key in ("critic_mask", "adv_whiten_mask"):
    assert rows[key].ours.startswith("the response") and rows[key].agrees


def test_whitening_over_the_response_needs_the_critic_on_it():
  rl = rl_of("search_r1.py:qwen2.5-3b-ppo")
  with pytest.raises(ValueError, match="rl.adv_whiten_mask='response' needs rl.critic_mask"):
    dataclasses.replace(rl, critic_mask="loss")
  with pytest.raises(ValueError, match="rl.value_head_init='normal'"):
    dataclasses.replace(rl, value_head_init="normal")
