"""Policy, KL, entropy and value losses, each a pure function of [B, T] arrays and a mask.

Every reduction goes through `aggregate`, whose per-row normalisers are fixed from the *whole*
batch: summing micro-batch losses then equals the full-batch loss exactly, which is what
makes gradient accumulation (and sharded vs unsharded) agree.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp

AGG_MODES = ("token-mean", "token-mean-per-micro-batch", "seq-mean-token-mean",
             "seq-mean-token-sum")
KL_ESTIMATORS = ("k1", "k2", "k3")


def agg_denominator(mask: jnp.ndarray, mode: str, rows: int = 0) -> jnp.ndarray:
  """[B] per-row normalisers `aggregate` divides each row's masked sum by, computed on this
  (full) batch, so that any split of its rows sums to the batch's loss.

  token-mean: the batch's trained tokens.  token-mean-per-micro-batch (verl: the token mean of
  each micro-batch of `rows` consecutive rows, averaged over the micro-batches): the trained
  tokens of the row's micro-batch times the micro-batches that have any.  seq-mean-token-mean
  (OpenRLHF, TRL): the row's trained tokens times the rows that have any.  seq-mean-token-sum:
  the rows that have any."""
  m = mask.astype(jnp.float32)
  per_row = m.sum(axis=1)
  b = m.shape[0]
  live_rows = jnp.maximum((per_row > 0).sum().astype(jnp.float32), 1.0)
  if mode == "token-mean":
    return jnp.full((b,), jnp.maximum(per_row.sum(), 1.0))
  if mode == "token-mean-per-micro-batch":
    if rows < 1:
      raise ValueError(f"loss aggregation {mode!r} needs the rows of a micro-batch (>= 1), "
                       f"got {rows}")
    n = -(-b // rows)
    chunk = jnp.pad(per_row, (0, n * rows - b)).reshape(n, rows).sum(axis=1)
    live = jnp.maximum((chunk > 0).sum().astype(jnp.float32), 1.0)
    return jnp.repeat(jnp.maximum(chunk, 1.0), rows)[:b] * live
  if mode == "seq-mean-token-mean":
    return jnp.maximum(per_row, 1.0) * live_rows
  if mode == "seq-mean-token-sum":
    return jnp.full((b,), live_rows)
  raise ValueError(f"unknown loss aggregation {mode!r}; known: {AGG_MODES}")


def aggregate(x: jnp.ndarray, mask: jnp.ndarray, mode: str,
              denom: Optional[jnp.ndarray] = None, rows: int = 0) -> jnp.ndarray:
  """Sum over rows of (the row's masked sum / its normaliser, `agg_denominator`): token-mean,
  the mean of micro-batch token means, the mean of row means, the mean of row sums.  Rows
  with no trained token count as 0."""
  m = mask.astype(jnp.float32)
  if denom is None:
    denom = agg_denominator(m, mode, rows)
  return ((x * m).sum(axis=1) / denom).sum()


def clipped_surrogate(logprobs, behaviour_logprobs, advantages, *, clip_low: float,
                      clip_high: float, dual_clip: Optional[float] = None, clip: bool = True):
  """Per-token PPO loss with separate low/high clip (DAPO) and optional dual clip (c > 1).

  Returns (loss [B, T], clipped [B, T] float indicator).  With dual clip, a negative-advantage
  token's loss is capped at -A * c, so a huge ratio cannot blow the update up.  `clip=False`
  is the plain importance-weighted loss -A * ratio (no clip: UR²'s paper, "we ... omit both
  KL-divergence and clipping terms").
  """
  ratio = jnp.exp(logprobs - behaviour_logprobs)
  loss1 = -advantages * ratio
  if not clip:
    return loss1, jnp.zeros_like(loss1)
  loss2 = -advantages * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  loss = jnp.maximum(loss1, loss2)
  clipped = (loss2 > loss1).astype(jnp.float32)
  if dual_clip is not None:
    if dual_clip <= 1.0:
      raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    loss3 = -advantages * dual_clip
    dual = jnp.minimum(loss, loss3)
    clipped = jnp.where((advantages < 0) & (loss > loss3), 1.0, clipped)
    loss = jnp.where(advantages < 0, dual, loss)
  return loss, clipped


def kl_penalty(logprobs, ref_logprobs, estimator: str, clamp: Optional[float] = 10.0):
  """Per-token KL(pi || ref) estimate from samples of pi (Schulman's k1/k2/k3).

  k1 = log pi - log ref; k2 = (log pi - log ref)^2 / 2; k3 = e^(ref-pi) - (ref-pi) - 1
  (verl's `low_var_kl`, clamped to +-10 as there).
  """
  log_ratio = logprobs - ref_logprobs
  if estimator == "k1":
    kl = log_ratio
  elif estimator == "k2":
    kl = 0.5 * jnp.square(log_ratio)
  elif estimator == "k3":
    kl = jnp.exp(-log_ratio) + log_ratio - 1.0
  else:
    raise ValueError(f"unknown KL estimator {estimator!r}; known: {KL_ESTIMATORS}")
  if clamp is not None and estimator == "k3":
    kl = jnp.clip(kl, -clamp, clamp)
  return kl


def clipped_value_loss(values, old_values, returns, clip: Optional[float]):
  """0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clip(V - V_old, +-clip)."""
  unclipped = jnp.square(values - returns)
  if clip is None:
    return 0.5 * unclipped, jnp.zeros_like(values)
  v_clip = old_values + jnp.clip(values - old_values, -clip, clip)
  clipped = jnp.square(v_clip - returns)
  return 0.5 * jnp.maximum(unclipped, clipped), (clipped > unclipped).astype(jnp.float32)
