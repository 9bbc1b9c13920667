"""Advantage estimators: GRPO, Dr.GRPO, RLOO, REINFORCE++-baseline (host side) and GAE (JAX),
each registered in `ragjax.registry` ("advantage").

Outcome estimators work on one scalar reward per trajectory and groups keyed by prompt uid, of
any size (REX-RAG clones enlarge a group).  They run on the host in float64: the arrays are
tiny and group bookkeeping is easier there.  GAE needs the critic's per-token values and runs
on device: it is a `critic_estimator`, called with the token rewards and values instead.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ragjax import registry


def _groups(group_ids: Sequence) -> list[np.ndarray]:
  ids = list(group_ids)
  index: dict = {}
  for i, g in enumerate(ids):
    index.setdefault(g, []).append(i)
  return [np.asarray(v) for v in index.values()]


def grpo_advantages(rewards, group_ids, *, use_std: bool = True, eps: float = 1e-6,
                    ddof: int = 1) -> np.ndarray:
  """(r - group mean) / (group std + eps); `use_std=False` is Dr.GRPO.

  Unbiased std (ddof=1) and eps=1e-6 as verl; a singleton group keeps its raw reward (mean 0,
  std 1), also as verl, since no baseline can be formed from one sample.
  """
  r = np.asarray(rewards, np.float64)
  out = np.zeros_like(r)
  for idx in _groups(group_ids):
    g = r[idx]
    if len(g) == 1:
      out[idx] = g
      continue
    centred = g - g.mean()
    out[idx] = centred / (g.std(ddof=ddof) + eps) if use_std else centred
  return out.astype(np.float32)


def rloo_advantages(rewards, group_ids) -> np.ndarray:
  """r_i - mean of the *other* rewards in the group (leave-one-out baseline)."""
  r = np.asarray(rewards, np.float64)
  out = np.zeros_like(r)
  for idx in _groups(group_ids):
    g = r[idx]
    n = len(g)
    out[idx] = g if n == 1 else g - (g.sum() - g) / (n - 1)
  return out.astype(np.float32)


def masked_whiten(x: np.ndarray, mask: np.ndarray, eps: float = 1e-8) -> np.ndarray:
  """(x - mean) / sqrt(max(var, eps)) over masked entries only, as OpenRLHF's replay buffer
  `normalize` runs it (`(sum / count)`, `var.clamp(min=1e-8).rsqrt()`; UR²'s fork counts the
  retrieval-masked tokens).  Zero off the mask."""
  x, m = np.asarray(x, np.float64), np.asarray(mask, np.float64)
  n = m.sum()
  if n == 0:
    return np.zeros_like(x, np.float32)
  mean = (x * m).sum() / n
  var = (((x - mean) ** 2) * m).sum() / n
  return ((x - mean) / np.sqrt(max(var, eps)) * m).astype(np.float32)


def verl_masked_whiten(x: np.ndarray, mask: np.ndarray, eps: float = 1e-8) -> np.ndarray:
  """(x - mean) * rsqrt(var + eps) over masked entries, the variance unbiased (n - 1), as
  verl's `masked_whiten` runs it at the end of GAE.  Zero off the mask, and everywhere when
  fewer than two entries are masked (verl raises there)."""
  x, m = np.asarray(x, np.float64), np.asarray(mask, np.float64)
  n = m.sum()
  if n < 2:
    return np.zeros_like(x, np.float32)
  mean = (x * m).sum() / n
  var = (((x - mean) ** 2) * m).sum() / (n - 1)
  return ((x - mean) / np.sqrt(var + eps) * m).astype(np.float32)


# rl.adv_whiten: how GAE advantages are whitened over the step's trained tokens ("" = not)
WHITENINGS = {"verl": verl_masked_whiten, "openrlhf": masked_whiten}


def whiten_advantages(advantages: np.ndarray, mask: np.ndarray, kind: str) -> np.ndarray:
  """The step's GAE advantages whitened by `kind` (a WHITENINGS name), or unchanged for ""."""
  if not kind:
    return np.asarray(advantages)
  if kind not in WHITENINGS:
    raise ValueError(f"unknown advantage whitening {kind!r}; known: {sorted(WHITENINGS)}")
  return WHITENINGS[kind](advantages, mask)


def reinforce_pp_baseline_advantages(rewards, group_ids, loss_mask, eps: float = 1e-8) -> np.ndarray:
  """UR^2 / OpenRLHF `reinforce_baseline` (seeds_ur2_rezero.md §A4.2): subtract the group
  mean (no std), give every trained token of the row that value (gamma = 1, no KL reward),
  then whiten over all trained tokens of the batch.  Returns [B, T]."""
  r = np.asarray(rewards, np.float64)
  centred = np.zeros_like(r)
  for idx in _groups(group_ids):
    centred[idx] = r[idx] - r[idx].mean()
  mask = np.asarray(loss_mask, np.float64)
  return masked_whiten(centred[:, None] * mask, mask, eps)


def reinforce_pp_group_norm_advantages(rewards, group_ids, loss_mask, eps: float = 1e-9,
                                       ddof: int = 1) -> np.ndarray:
  """UR²'s Eq. 3 as its paper writes it (§3.2, App. C.1: "normalization is first performed
  within each rollout group, followed by global normalization across the full batch"):
  (r - group mean) / (group std + eps), the group's unbiased std and eps 1e-9 as OpenRLHF's
  `group_norm` estimator, then the same masked batch whitening.  A singleton group keeps
  r - mean = 0.  Returns [B, T]."""
  r = np.asarray(rewards, np.float64)
  normed = np.zeros_like(r)
  for idx in _groups(group_ids):
    g = r[idx]
    centred = g - g.mean()
    normed[idx] = centred / (g.std(ddof=ddof) + eps) if len(g) > 1 else centred
  mask = np.asarray(loss_mask, np.float64)
  return masked_whiten(normed[:, None] * mask, mask)


@registry.register("advantage", "grpo")
def grpo_estimator(rewards, group_ids, loss_mask, eps: float = 1e-6) -> np.ndarray:
  """GRPO: (r - group mean) / (group std + eps), on every trained token."""
  return grpo_advantages(rewards, group_ids, use_std=True, eps=eps)[:, None] * loss_mask


@registry.register("advantage", "drgrpo")
def drgrpo_estimator(rewards, group_ids, loss_mask, eps: float = 1e-6) -> np.ndarray:
  """Dr. GRPO: r - group mean, no std division."""
  return grpo_advantages(rewards, group_ids, use_std=False)[:, None] * loss_mask


@registry.register("advantage", "rloo")
def rloo_estimator(rewards, group_ids, loss_mask, eps: float = 1e-6) -> np.ndarray:
  """RLOO: r minus the mean of the other samples of its group."""
  return rloo_advantages(rewards, group_ids)[:, None] * loss_mask


@registry.register("advantage", "reinforce_pp_baseline")
def reinforce_pp_baseline_estimator(rewards, group_ids, loss_mask, eps: float = 1e-6
                                    ) -> np.ndarray:
  """REINFORCE++-baseline (OpenRLHF): r - group mean, whitened over the batch's tokens."""
  return reinforce_pp_baseline_advantages(rewards, group_ids, loss_mask)


@registry.register("advantage", "reinforce_pp_group_norm")
def reinforce_pp_group_norm_estimator(rewards, group_ids, loss_mask, eps: float = 1e-6
                                      ) -> np.ndarray:
  """REINFORCE++ with group std (UR² Eq. 3): (r - mean) / std per group, whitened over the batch."""
  return reinforce_pp_group_norm_advantages(rewards, group_ids, loss_mask)


def critic_estimator(fn):
  """Marks advantage estimator `fn` as one that needs the critic: the run trains a value head
  and calls fn(token_rewards, values, loss_mask, *, gamma, lam) -> (advantages, returns)."""
  fn.uses_critic = True
  return fn


def uses_critic(estimator: str) -> bool:
  """Whether the registered estimator `estimator` needs the critic (`critic_estimator`)."""
  return bool(getattr(registry.lookup("advantage", estimator), "uses_critic", False))


def outcome_advantages(estimator: str, rewards, group_ids, loss_mask, *, eps: float = 1e-6) -> np.ndarray:
  """The registered estimator by name; always [B, T] advantages, zero off the loss mask."""
  mask = np.asarray(loss_mask, np.float32)
  return registry.lookup("advantage", estimator)(rewards, group_ids, mask, eps=eps)


def critic_advantages(estimator: str, token_rewards, values, loss_mask, *, gamma: float,
                      lam: float):
  """The registered critic estimator by name: ([B, T] advantages, [B, T] returns)."""
  return registry.lookup("advantage", estimator)(token_rewards, values, loss_mask, gamma=gamma,
                                                 lam=lam)


def gae(token_rewards: jnp.ndarray, values: jnp.ndarray, mask: jnp.ndarray, gamma: float,
        lam: float) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Generalised advantage estimation over the trained tokens of each row.

  Untrained tokens (retrieved documents, prompt, padding) are skipped: the recursion passes
  through them, so a retrieved block neither bootstraps nor discounts.  Returns (advantages,
  returns), both zero off the mask; returns = advantages + values.
  """
  m = mask.astype(jnp.float32)
  r, v = token_rewards.astype(jnp.float32), values.astype(jnp.float32)

  def step(carry, x):
    next_v, next_a = carry
    r_t, v_t, m_t = x
    delta = r_t + gamma * next_v - v_t
    a_t = delta + gamma * lam * next_a
    keep = m_t > 0
    carry = (jnp.where(keep, v_t, next_v), jnp.where(keep, a_t, next_a))
    return carry, jnp.where(keep, a_t, 0.0)

  zeros = jnp.zeros(r.shape[0], jnp.float32)
  _, adv = jax.lax.scan(step, (zeros, zeros), (r.T, v.T, m.T), reverse=True)
  adv = adv.T
  return adv, (adv + v) * m



@registry.register("advantage", "gae")
@critic_estimator
def gae_estimator(token_rewards, values, loss_mask, *, gamma: float, lam: float):
  """GAE (PPO): per-token advantages from the critic's values; trains a critic."""
  return gae(jnp.asarray(token_rewards), jnp.asarray(values), jnp.asarray(loss_mask), gamma,
             lam)
