"""The typed batch the train step consumes, built once from a rollout's arrays.

Alignment convention: every per-token array is aligned with `tokens`; entry t refers to
*predicting* tokens[:, t] from tokens[:, :t] (what a sampler records when it emits token t).
Position 0 is never predicted, so its loss mask is always 0.  Masks, attention and positions
come from the source labels (`ragjax.rollout.labels`), the one place they are defined.
"""

from __future__ import annotations

from typing import Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from ragjax.rl.losses import agg_denominator
from ragjax.rl.masks import DEFAULT_TRAIN_ON, Masks, masks as label_masks
from ragjax.parallel.buckets import pick_bucket


@flax.struct.dataclass
class TrainBatch:
  """One update's worth of trajectories; all [B, T]. Optional fields are None when unused."""
  tokens: jnp.ndarray                 # int32
  positions: jnp.ndarray              # int32
  attention_mask: jnp.ndarray         # int32, 1 = real token
  loss_mask: jnp.ndarray              # float32, 1 = trained on
  advantages: jnp.ndarray             # float32
  old_logprobs: jnp.ndarray           # float32, log pi_old (ratio denominator by default)
  behaviour_logprobs: Optional[jnp.ndarray] = None  # overrides the denominator (REX-RAG mu)
  ref_logprobs: Optional[jnp.ndarray] = None        # frozen reference, for the KL loss
  returns: Optional[jnp.ndarray] = None             # PPO critic targets
  old_values: Optional[jnp.ndarray] = None          # critic values at rollout time
  critic_mask: Optional[jnp.ndarray] = None         # float32, the critic's tokens (None: loss_mask)
  # Gathered form (optional): each row's trained positions, padded with 0 to a bucket K, so
  # the policy loss projects only those hidden states onto the vocabulary.
  loss_index: Optional[jnp.ndarray] = None          # [B, K] int32
  # [B] per-row loss normalisers fixed on a larger batch this one was cut from
  # (`rows_with_gradient`); None: the update computes them on this batch
  denominator: Optional[jnp.ndarray] = None

  @property
  def shape(self):
    return self.tokens.shape


def broadcast_sequence_advantages(seq_adv: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
  """A per-sequence advantage copied onto every trained token of that sequence."""
  return (np.asarray(seq_adv, np.float32)[:, None] * np.asarray(loss_mask, np.float32))


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
  """lo, 2 lo, 4 lo, ... up to the first value >= hi (a few shapes, so few compiles)."""
  out = [lo]
  while out[-1] < hi:
    out.append(out[-1] * 2)
  return tuple(out)


def trained_positions(mask: np.ndarray) -> np.ndarray:
  """[B, K] indices of each row's trained tokens, padded with 0 (position 0 is never trained,
  so a gathered mask is 0 there)."""
  mask = np.asarray(mask) > 0
  longest = int(mask.sum(axis=1).max()) if mask.size else 0
  k = min(pick_bucket(powers_of_two(16, longest), longest, "trained tokens"), mask.shape[1])
  index = np.zeros((mask.shape[0], k), np.int32)
  for i in range(mask.shape[0]):
    pos = np.flatnonzero(mask[i])
    index[i, :len(pos)] = pos
  return index


def make_train_batch(tokens, labels, advantages, old_logprobs, *,
                     train_on: Sequence[str] = DEFAULT_TRAIN_ON, masks: Optional[Masks] = None,
                     behaviour_logprobs=None, ref_logprobs=None, returns=None,
                     old_values=None, gather: bool = False, critic_mask=None) -> TrainBatch:
  """Builds a TrainBatch from rollout arrays; `advantages` is [B] (per sequence) or [B, T].

  `masks`: the labels' masks (`ragjax.rollout.labels.masks(labels, train_on)`) when the caller
  built them already, as the trainer's step batch does; else they are built here.  gather=True
  also lists the trained positions (`loss_index`): the same loss, with less vocabulary
  projection when the policy wrote few of a trajectory's tokens.  `critic_mask`: the tokens
  the critic's value loss covers when they are not the loss mask's (`rl.critic_mask`)."""
  tokens = np.asarray(tokens, np.int32)
  labels = np.asarray(labels)
  if tokens.ndim != 2 or labels.shape != tokens.shape:
    raise ValueError(f"tokens {tokens.shape} and labels {labels.shape} must both be [B, T]")
  b, t = tokens.shape
  if masks is None:
    masks = label_masks(labels, train_on)
  elif any(np.shape(m) != (b, t) for m in masks):
    raise ValueError(f"masks must be [B, T]={(b, t)}, got {[np.shape(m) for m in masks]}")
  mask = masks.loss
  adv = np.asarray(advantages, np.float32)
  if adv.shape == (b,):
    adv = broadcast_sequence_advantages(adv, mask)
  elif adv.shape != (b, t):
    raise ValueError(f"advantages must be [B]={b} or [B, T]={(b, t)}, got {adv.shape}")

  def opt(name, x):
    if x is None:
      return None
    x = np.asarray(x, np.float32)
    if x.shape != (b, t):
      raise ValueError(f"{name} must be [B, T]={(b, t)}, got {x.shape}")
    return jnp.asarray(x)

  return TrainBatch(
      tokens=jnp.asarray(tokens), positions=jnp.asarray(masks.positions),
      attention_mask=jnp.asarray(masks.attention), loss_mask=jnp.asarray(mask),
      advantages=jnp.asarray(adv * mask), old_logprobs=opt("old_logprobs", old_logprobs),
      behaviour_logprobs=opt("behaviour_logprobs", behaviour_logprobs),
      ref_logprobs=opt("ref_logprobs", ref_logprobs), returns=opt("returns", returns),
      old_values=opt("old_values", old_values), critic_mask=opt("critic_mask", critic_mask),
      loss_index=jnp.asarray(trained_positions(mask)) if gather else None)


def pad_batch_rows(batch: TrainBatch, rows: int) -> TrainBatch:
  """The batch grown to `rows` rows with copies of row 0 that train on nothing (loss mask and
  advantages 0): every loss and metric is masked, so the update is the unpadded one, while the
  update sees a fixed number of rows (a variable row count, e.g. REX-RAG's kept clones, would
  otherwise compile a new update each step).  Copies of a real row, not PAD rows, keep every
  attention row non-empty."""
  n = batch.tokens.shape[0]
  if rows < n:
    raise ValueError(f"cannot pad a batch of {n} rows down to {rows}")
  if rows == n:
    return batch
  index = np.concatenate([np.arange(n), np.zeros(rows - n, np.int64)])
  out = jax.tree.map(lambda x: x[index], batch)
  real = jnp.asarray(np.arange(rows) < n)[:, None]
  return out.replace(loss_mask=jnp.where(real, out.loss_mask, 0.0),
                     advantages=jnp.where(real, out.advantages, 0.0),
                     critic_mask=None if out.critic_mask is None else
                     jnp.where(real, out.critic_mask, 0.0))


def rows_with_gradient(batch: TrainBatch, loss_agg: str, agg_rows: int = 0,
                       unit: int = 1) -> tuple[TrainBatch, float]:
  """The rows of `batch` that carry a policy gradient (a non-zero advantage on a trained
  token), carrying the per-row loss normalisers of the whole batch (`batch.denominator`), and
  grown with rows that train on nothing to the first of `unit` x 1, 2, 3, 4, 6, 8, 12, ...
  that holds them (few shapes, few compiles, at most a third of the rows padding).  A row
  whose advantage is 0 adds exactly 0 to the clipped surrogate and its gradient; without a
  KL loss or an entropy bonus (`RLConfig` checks `rl.skip_zero_advantage_rows` for that) the
  update of these rows is the whole batch's.  When
  no row carries one, one row that trains on nothing stands in: the optimiser still steps (its
  momentum and weight decay move the params as the whole batch's zero gradient would).

  Also returns the factor that turns the kept rows' token means (entropy, ratio, clip
  fraction, approx_kl_old), normalised by the whole batch, into means over the kept rows.
  The batch unchanged, factor 1, when the kept rows would not fit in fewer rows."""
  mask = np.asarray(batch.loss_mask)
  adv = np.asarray(batch.advantages)
  n = mask.shape[0]
  live = np.flatnonzero(((adv != 0) & (mask > 0)).any(axis=1))
  need = max(len(live), 1)
  steps = powers_of_two(unit, need)
  rows = min(r for r in (*steps, *(3 * s // 2 for s in steps[1:])) if r >= need)
  if rows >= n:
    return batch, 1.0
  d = np.asarray(agg_denominator(batch.loss_mask, loss_agg, agg_rows))
  index = live if len(live) else np.zeros(1, np.int64)
  kept = jax.tree.map(lambda x: x[index], batch).replace(denominator=jnp.asarray(d[index]))
  factor = 1.0
  if len(live):
    d_kept = np.asarray(agg_denominator(kept.loss_mask, loss_agg, agg_rows))
    factor = float(d[index[0]] / d_kept[0])
  else:
    kept = kept.replace(loss_mask=jnp.zeros_like(kept.loss_mask),
                        advantages=jnp.zeros_like(kept.advantages))
  return pad_batch_rows(kept, rows), factor
