"""The typed batch the train step consumes, and how rollout arrays + rewards become one.

Alignment convention: every per-token array is aligned with `tokens`; entry t refers to
*predicting* tokens[:, t] from tokens[:, :t] (what a sampler records when it emits token t).
Position 0 is never predicted, so its loss mask is always 0.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import flax.struct
import jax.numpy as jnp
import numpy as np

# Per-token source labels (the rollout writes them while concatenating spans).
LABELS: dict[str, int] = {"padding": 0, "prompt": 1, "policy": 2, "retrieved": 3,
                          "injected": 4, "environment": 5}
# Search-R1 trains on the policy's own tokens; REX-RAG also trains on injected probe prompts.
DEFAULT_TRAIN_ON = ("policy",)


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
  # Gathered form (optional): each row's trained positions, padded with 0 to a bucket K, so
  # the policy loss projects only those hidden states onto the vocabulary.
  loss_index: Optional[jnp.ndarray] = None          # [B, K] int32

  @property
  def shape(self):
    return self.tokens.shape


def loss_mask_from_labels(labels: np.ndarray, train_on: Sequence[str] = DEFAULT_TRAIN_ON,
                          label_ids: Mapping[str, int] = LABELS) -> np.ndarray:
  """1.0 where the token's source label is trained on; retrieved text is never in `train_on`."""
  unknown = [n for n in train_on if n not in label_ids]
  if unknown:
    raise ValueError(f"unknown source labels {unknown} in train_on; known: {sorted(label_ids)}")
  if "retrieved" in train_on:
    raise ValueError("retrieved tokens are observations and cannot be trained on")
  ids = np.asarray([label_ids[n] for n in train_on])
  mask = np.isin(np.asarray(labels), ids).astype(np.float32)
  mask[:, 0] = 0.0
  return mask


def positions_from_mask(attention_mask: np.ndarray) -> np.ndarray:
  """Positions count real tokens only, so left padding does not shift RoPE."""
  am = np.asarray(attention_mask).astype(np.int32)
  return np.maximum(np.cumsum(am, axis=1) - 1, 0).astype(np.int32)


def broadcast_sequence_advantages(seq_adv: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
  """A per-sequence advantage copied onto every trained token of that sequence."""
  return (np.asarray(seq_adv, np.float32)[:, None] * np.asarray(loss_mask, np.float32))


def last_token_index(loss_mask: np.ndarray) -> np.ndarray:
  """Index of each row's last trained token (-1 when a row has none)."""
  lm = np.asarray(loss_mask) > 0
  t = lm.shape[1]
  idx = t - 1 - np.argmax(lm[:, ::-1], axis=1)
  return np.where(lm.any(axis=1), idx, -1)


def gather_bucket(n: int, minimum: int = 16) -> int:
  """K for a batch whose longest row trains on n tokens: powers of two (few compiles)."""
  k = minimum
  while k < n:
    k *= 2
  return k


def trained_positions(loss_mask: np.ndarray) -> np.ndarray:
  """[B, K] indices of each row's trained tokens, padded with 0 (position 0 is never trained,
  so a gathered mask is 0 there)."""
  mask = np.asarray(loss_mask) > 0
  counts = mask.sum(axis=1)
  k = min(gather_bucket(int(counts.max()) if counts.size else 0), mask.shape[1])
  index = np.zeros((mask.shape[0], k), np.int32)
  for i in range(mask.shape[0]):
    pos = np.flatnonzero(mask[i])
    index[i, :len(pos)] = pos
  return index


def make_train_batch(tokens, labels, advantages, old_logprobs, *,
                     train_on: Sequence[str] = DEFAULT_TRAIN_ON,
                     label_ids: Mapping[str, int] = LABELS,
                     behaviour_logprobs=None, ref_logprobs=None, returns=None,
                     old_values=None, gather: bool = False) -> TrainBatch:
  """Builds a TrainBatch from rollout arrays; `advantages` is [B] (per sequence) or [B, T].

  gather=True also lists the trained positions (`loss_index`): the same loss, with less
  vocabulary projection when the policy wrote few of a trajectory's tokens."""
  tokens = np.asarray(tokens, np.int32)
  labels = np.asarray(labels)
  if tokens.ndim != 2 or labels.shape != tokens.shape:
    raise ValueError(f"tokens {tokens.shape} and labels {labels.shape} must both be [B, T]")
  b, t = tokens.shape
  attention = (labels != label_ids["padding"]).astype(np.int32)
  loss_mask = loss_mask_from_labels(labels, train_on, label_ids)
  adv = np.asarray(advantages, np.float32)
  if adv.shape == (b,):
    adv = broadcast_sequence_advantages(adv, loss_mask)
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
      tokens=jnp.asarray(tokens), positions=jnp.asarray(positions_from_mask(attention)),
      attention_mask=jnp.asarray(attention), loss_mask=jnp.asarray(loss_mask),
      advantages=jnp.asarray(adv * loss_mask), old_logprobs=opt("old_logprobs", old_logprobs),
      behaviour_logprobs=opt("behaviour_logprobs", behaviour_logprobs),
      ref_logprobs=opt("ref_logprobs", ref_logprobs), returns=opt("returns", returns),
      old_values=opt("old_values", old_values),
      loss_index=jnp.asarray(trained_positions(loss_mask)) if gather else None)
