"""Supervised fine-tuning (cold start) on trajectories with loss masks, via the RL step machinery.

Same chunked log-probs, same `make_update` (micro-batches, sharding, optax), so SFT and RL share
one tested path.  Only the loss differs: masked token cross-entropy.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import flax.struct
import jax.numpy as jnp
import numpy as np

from ragjax.models.config import DecoderConfig
from ragjax.rl.batch import DEFAULT_TRAIN_ON, LABELS, loss_mask_from_labels, positions_from_mask
from ragjax.rl.logprobs import sequence_logprobs
from ragjax.rl.losses import agg_denominator, aggregate


@flax.struct.dataclass
class SFTBatch:
  tokens: jnp.ndarray
  positions: jnp.ndarray
  attention_mask: jnp.ndarray
  loss_mask: jnp.ndarray


def make_sft_batch(tokens, labels, train_on: Sequence[str] = DEFAULT_TRAIN_ON,
                   label_ids: Mapping[str, int] = LABELS) -> SFTBatch:
  """Trajectory arrays -> SFTBatch; retrieved documents and prompts are never trained on."""
  tokens, labels = np.asarray(tokens, np.int32), np.asarray(labels)
  if tokens.shape != labels.shape or tokens.ndim != 2:
    raise ValueError(f"tokens {tokens.shape} and labels {labels.shape} must both be [B, T]")
  attn = (labels != label_ids["padding"]).astype(np.int32)
  return SFTBatch(tokens=jnp.asarray(tokens), positions=jnp.asarray(positions_from_mask(attn)),
                  attention_mask=jnp.asarray(attn),
                  loss_mask=jnp.asarray(loss_mask_from_labels(labels, train_on, label_ids)))


def sft_loss_fn(model_cfg: DecoderConfig, agg: str = "token-mean", chunk: int = 8192):
  """(loss_fn, denom_fn) for `make_update`: masked negative log-likelihood."""

  def denom(batch: SFTBatch):
    return agg_denominator(batch.loss_mask, agg)

  def loss_fn(params, batch: SFTBatch, d):
    logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                  batch.attention_mask, chunk=chunk)
    nll = aggregate(-logp, batch.loss_mask, agg, d)
    return nll, {"loss": nll, "nll": nll, "entropy": aggregate(ent, batch.loss_mask, agg, d)}

  return loss_fn, denom
