"""Advantage estimators against hand-computed numbers (Search-R1 GRPO, Dr.GRPO, RLOO,
UR^2's REINFORCE++-baseline, GAE with retrieved tokens skipped)."""

import math
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.rl.advantages import (gae, grpo_advantages, outcome_advantages,
                                  reinforce_pp_baseline_advantages,
                                  reinforce_pp_group_norm_advantages, rloo_advantages,
                                  whiten_advantages)
from ragjax.rl.run_config import RLConfig
from ragjax.rl.step_batch import step_advantages
from ragjax.rl.token_rewards import place_rewards

# Group "q1" has G=5 EM rewards [1,0,0,1,1]: mean 0.6, unbiased std sqrt(1.2/4)=sqrt(0.3).
REWARDS = [1, 0, 0, 1, 1, 0.5, 2, 2]
GROUPS = ["q1", "q1", "q1", "q1", "q1", "q2", "q3", "q3"]


def test_grpo_hand_numbers():
  a = grpo_advantages(REWARDS, GROUPS)
  up, down = 0.4 / math.sqrt(0.3), -0.6 / math.sqrt(0.3)   # 0.730297, -1.095445
  np.testing.assert_allclose(a[:5], [up, down, down, up, up], rtol=1e-5)
  assert a[5] == pytest.approx(0.5)        # singleton group keeps its reward (verl: mean 0, std 1)
  np.testing.assert_array_equal(a[6:], [0.0, 0.0])  # equal rewards: zero advantage, no NaN


def test_drgrpo_has_no_std():
  a = grpo_advantages(REWARDS, GROUPS, use_std=False)
  np.testing.assert_allclose(a[:5], [0.4, -0.6, -0.6, 0.4, 0.4], rtol=1e-6)


def test_groups_of_any_size_and_order():
  # a REX-RAG clone joins group "q1" out of order: the group becomes 6 wide
  a = grpo_advantages([1, 0, 1, 1], ["q1", "q2", "q1", "q1"])
  # q1 = [1,1,1] -> zeros; q2 singleton -> raw reward 0
  np.testing.assert_array_equal(a, [0, 0, 0, 0])
  b = grpo_advantages([1, 0, 0], [7, 7, 7])
  mean, std = 1 / 3, math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
  np.testing.assert_allclose(b, [(1 - mean) / std, -mean / std, -mean / std], rtol=1e-5)


def test_rloo_hand_numbers():
  a = rloo_advantages(REWARDS, GROUPS)
  # 1 - mean(other four = [0,0,1,1]) = 0.5; 0 - mean([1,0,1,1]) = -0.75
  np.testing.assert_allclose(a[:5], [0.5, -0.75, -0.75, 0.5, 0.5], rtol=1e-6)
  np.testing.assert_allclose(a[6:], [0.0, 0.0])


def test_reinforce_pp_baseline_hand_numbers():
  # group A rewards [1, 0] -> centred [0.5, -0.5]; group B [3, 1] -> [1, -1]
  mask = np.array([[0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]], np.float32)
  a = reinforce_pp_baseline_advantages([1, 0, 3, 1], ["A", "A", "B", "B"], mask)
  # six trained tokens: 0.5, 0.5, -0.5, 1, -1, -1 -> mean -1/12, var 3.708333/6, std 0.786165
  mean = -0.5 / 6
  std = math.sqrt(((0.5 - mean) ** 2 * 2 + (-0.5 - mean) ** 2 + (1 - mean) ** 2
                   + (-1 - mean) ** 2 * 2) / 6)
  assert std == pytest.approx(0.786165, abs=1e-6)
  expect = np.array([[0, 0.741999, 0.741999, 0], [0, -0.529999, 0, 0], [0, 0, 1.377998, 0],
                     [0, -1.165999, 0, -1.165999]])
  np.testing.assert_allclose(a, expect, atol=2e-6)
  assert a[mask == 0].tolist() == [0.0] * int((mask == 0).sum())


def test_reinforce_pp_baseline_floors_the_variance_like_openrlhf():
  """OpenRLHF clamps the variance at 1e-8 (`clamp(min=1e-8).rsqrt()`), it does not add it:
  with group rewards [1, 1 + 1e-4] and one token each, centred values are -/+5e-5, variance
  2.5e-9 < 1e-8, so the whitened values are -/+5e-5 / 1e-4 = -/+0.5 (adding eps would give
  -/+0.4472)."""
  mask = np.ones((2, 1), np.float32)
  a = reinforce_pp_baseline_advantages([1.0, 1.0 + 1e-4], ["g", "g"], mask)
  np.testing.assert_allclose(a[:, 0], [-0.5, 0.5], rtol=1e-4)
  # all rewards equal in every group: all zero, never NaN
  assert not reinforce_pp_baseline_advantages([2, 2, 0, 0], [0, 0, 1, 1], np.ones((4, 3))).any()


def test_reinforce_pp_group_norm_is_ur2s_eq3_as_written():
  """UR²'s Eq. 3 as the paper writes it (group mean and std, then batch whitening): group A
  [1, 0] -> centred [0.5, -0.5] / std 0.707107 = [0.707107, -0.707107]; group B [3, 1] ->
  [1, -1] / 1.414214 = the same; whitened over the six trained tokens (values 0.707107 x
  (1, 1, -1, 1, -1, -1)): mean 0, std 0.707107, so every token is +-1.  The code's
  mean-only estimator above gives group B twice group A's weight instead."""
  mask = np.array([[0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]], np.float32)
  a = reinforce_pp_group_norm_advantages([1, 0, 3, 1], ["A", "A", "B", "B"], mask)
  np.testing.assert_allclose(a, [[0, 1, 1, 0], [0, -1, 0, 0], [0, 0, 1, 0], [0, -1, 0, -1]],
                             atol=1e-6)
  np.testing.assert_allclose(outcome_advantages("reinforce_pp_group_norm", [1, 0, 3, 1],
                                                ["A", "A", "B", "B"], mask), a)
  assert not reinforce_pp_group_norm_advantages([2, 2, 5], [0, 0, 1], np.ones((3, 2))).any()


def test_outcome_dispatch_broadcasts_on_mask_and_rejects_unknown():
  mask = np.array([[0, 1, 1], [0, 0, 1]], np.float32)
  a = outcome_advantages("drgrpo", [1.0, 0.0], [0, 0], mask)
  np.testing.assert_allclose(a, [[0, 0.5, 0.5], [0, 0, -0.5]])
  with pytest.raises(KeyError, match="unknown advantage 'ppo'"):
    outcome_advantages("ppo", [1.0], [0], mask[:1])


def test_gae_hand_numbers_gamma_lambda_one():
  r = jnp.array([[0.0, 0.0, 1.0]])
  v = jnp.array([[0.5, 0.2, 0.4]])
  adv, ret = gae(r, v, jnp.ones((1, 3)), 1.0, 1.0)
  np.testing.assert_allclose(adv, [[0.5, 0.8, 0.6]], rtol=1e-6)   # sum of future rewards - V
  np.testing.assert_allclose(ret, [[1.0, 1.0, 1.0]], rtol=1e-6)


def test_gae_hand_numbers_discounted_with_retrieved_block_skipped():
  # gamma .9, lambda .5: d2 = 1-.4 = .6; d1 = .9*.4-.2 = .16, A1 = .16+.45*.6 = .43;
  # d0 = .9*.2-.5 = -.32, A0 = -.32+.45*.43 = -.1265.  Positions 2, 3 are retrieved tokens
  # (mask 0, garbage values 9) and must be passed through untouched.
  r = jnp.array([[0.0, 0.0, 0.0, 0.0, 1.0]])
  v = jnp.array([[0.5, 0.2, 9.0, 9.0, 0.4]])
  m = jnp.array([[1, 1, 0, 0, 1]])
  adv, ret = gae(r, v, m, 0.9, 0.5)
  np.testing.assert_allclose(adv, [[-0.1265, 0.43, 0.0, 0.0, 0.6]], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(ret, [[0.3735, 0.63, 0.0, 0.0, 1.0]], rtol=1e-5, atol=1e-7)


def test_gae_advantages_are_whitened_over_the_steps_tokens_as_verl_and_openrlhf_do():
  """Two rows, rewards 1 and 0 on their last token, values 0.5 / 0.2 / 0.4 and 0.1 / 0.3
  (gamma = lambda = 1): GAE gives [0.5, 0.8, 0.6] and [-0.1, -0.3]; the returns stay GAE's.
  Mean 0.3; squared deviations .04 + .25 + .09 + .16 + .36 = .9.  verl (unbiased): var .9/4,
  std .474342; OpenRLHF (biased): var .9/5, std .424264."""
  sb = SimpleNamespace(step_rewards=[[1.0], [0.0]], step_ends=[[], []],
                       loss_mask=np.array([[1, 1, 1], [1, 1, 0]], np.float32),
                       values=np.array([[0.5, 0.2, 0.4], [0.1, 0.3, 7.0]], np.float32),
                       old_logprobs=None, ref_logprobs=None)
  raw = np.array([[0.5, 0.8, 0.6], [-0.1, -0.3, 0.0]])
  mask = sb.loss_mask.astype(bool)
  for kind, std in (("", None), ("verl", math.sqrt(0.9 / 4)), ("openrlhf", math.sqrt(0.9 / 5))):
    rl = RLConfig(advantage="gae", group_size=1, kl_coef=0.0, adv_whiten=kind)
    adv, ret = step_advantages(sb, rl)
    want = raw if std is None else np.where(mask, (raw - 0.3) / std, 0.0)
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-6, err_msg=kind)
    np.testing.assert_allclose(ret, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], atol=1e-6)
  # one trained token: nothing to whiten against (verl raises; ragjax gives 0)
  assert not whiten_advantages(np.array([[2.0]]), np.array([[1.0]]), "verl").any()
  with pytest.raises(ValueError, match="rl.adv_whiten='verl' whitens GAE advantages"):
    RLConfig(adv_whiten="verl")
  with pytest.raises(ValueError, match="unknown advantage whitening 'z'"):
    whiten_advantages(raw, sb.loss_mask, "z")


def test_reward_placement():
  """The one placement function (trainer and step samples): an outcome on the row's last
  trained token (nothing for a row that trains on none), per-step rewards on their step ends
  and the last step's on the trajectory's end."""
  mask = np.array([[0, 1, 1, 0], [0, 0, 0, 0]], np.float32)
  np.testing.assert_array_equal(place_rewards([[2.0], [5.0]], mask), [[0, 0, 2, 0], [0, 0, 0, 0]])
  out = place_rewards([[0.1, 0.6]], np.array([[0, 1, 1, 1]]), [[1, 3]])
  np.testing.assert_allclose(out, [[0, 0.1, 0, 0.6]])
  with pytest.raises(ValueError, match="row 0: 1 step rewards but 2 step ends"):
    place_rewards([[0.1]], np.array([[0, 1, 1, 1]]), [[1, 3]])
  mask = np.zeros((2, 10), np.float32)
  mask[0, 2:4] = mask[0, 6:9] = 1          # row 0: two turns
  mask[1, 3:5] = 1                          # row 1: one turn
  out = place_rewards([[0.5, 2.0], [1.0]], mask, [[3, 8], [4]])
  want = np.zeros((2, 10), np.float32)
  want[0, 3], want[0, 8], want[1, 4] = 0.5, 2.0, 1.0
  np.testing.assert_array_equal(out, want)
  # a step that kept no token (-1) folds into the final reward; so does a zero-turn row's
  np.testing.assert_array_equal(place_rewards([[0.5, 2.0], [1.5]], mask, [[-1, 8], []]),
                                [np.where(np.arange(10) == 8, 2.5, 0.0),
                                 np.where(np.arange(10) == 4, 1.5, 0.0)])


def test_gae_is_a_registered_critic_estimator():
  """Issue 55: GAE is an advantage like the others; the run trains a critic because the
  registered estimator says so (`critic_estimator`), not because its name is "gae"."""
  from ragjax import registry
  from ragjax.rl import advantages as A
  from ragjax.rl.run_config import RLConfig
  assert "gae" in registry.names("advantage")
  assert A.uses_critic("gae") and not A.uses_critic("grpo")
  assert RLConfig(advantage="gae").uses_critic and not RLConfig().uses_critic
  r = np.array([[0.0, 0.5, 1.0], [1.0, 0.0, 0.0]], np.float32)
  v = np.array([[0.1, 0.2, 0.3], [0.0, 0.4, 0.0]], np.float32)
  m = np.array([[1, 1, 1], [1, 0, 1]], np.float32)
  a, ret = A.critic_advantages("gae", r, v, m, gamma=0.9, lam=0.8)
  a0, ret0 = A.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(m), 0.9, 0.8)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(a0))
  np.testing.assert_array_equal(np.asarray(ret), np.asarray(ret0))
