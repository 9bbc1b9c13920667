"""Supervised fine-tuning (cold start) on trajectories with loss masks, via the RL step machinery.

Same chunked log-probs, same `make_update` (micro-batches, sharding, optax), so SFT and RL share
one tested path.  Only the loss differs: masked token cross-entropy.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import flax.struct
import jax.numpy as jnp
import numpy as np

from ragjax.models.config import DecoderConfig
from ragjax.rl.batch import (DEFAULT_TRAIN_ON, LABELS, loss_mask_from_labels, positions_from_mask,
                             trained_positions)
from ragjax.rl.logprobs import logprobs_at, sequence_logprobs
from ragjax.rl.losses import agg_denominator, aggregate


@flax.struct.dataclass
class SFTBatch:
  tokens: jnp.ndarray
  positions: jnp.ndarray
  attention_mask: jnp.ndarray
  loss_mask: jnp.ndarray
  # Language-modelling auxiliary (optional): 1 on every other real token, see make_sft_batch.
  context_mask: Optional[jnp.ndarray] = None
  # Gathered form (optional): the trained positions of each row, padded to a bucket K.
  loss_index: Optional[jnp.ndarray] = None    # [B, K] int32, positions t >= 1
  loss_weight: Optional[jnp.ndarray] = None   # [B, K] float32, 0 on padding entries


def make_sft_batch(tokens, labels, train_on: Sequence[str] = DEFAULT_TRAIN_ON,
                   label_ids: Mapping[str, int] = LABELS, gather: bool = False,
                   context: bool = False) -> SFTBatch:
  """Trajectory arrays -> SFTBatch; by default retrieved documents and prompts are not trained on.

  gather=True also lists each row's trained positions, so the loss projects only those
  hidden states onto the vocabulary (same loss, less work when few tokens are trained on).
  context=True also marks every other real token (prompt, documents) for the
  language-modelling auxiliary of `sft_loss_fn(context_weight=...)`: a policy trained from
  scratch has never read text, and the documents, which repeat their entity names, teach it
  to copy names.  A context batch is never gathered (its loss covers every position).
  """
  tokens, labels = np.asarray(tokens, np.int32), np.asarray(labels)
  if tokens.shape != labels.shape or tokens.ndim != 2:
    raise ValueError(f"tokens {tokens.shape} and labels {labels.shape} must both be [B, T]")
  attn = (labels != label_ids["padding"]).astype(np.int32)
  mask = loss_mask_from_labels(labels, train_on, label_ids)
  index = weight = context_mask = None
  if context:
    context_mask = ((attn > 0) & (mask == 0)).astype(np.float32)
    context_mask[:, 0] = 0.0
    context_mask = jnp.asarray(context_mask)
  elif gather:
    index = trained_positions(mask)
    weight = np.take_along_axis(mask, index, axis=1)     # 0 on the padding (position 0)
    index, weight = jnp.asarray(np.maximum(index, 1)), jnp.asarray(weight)
  return SFTBatch(tokens=jnp.asarray(tokens), positions=jnp.asarray(positions_from_mask(attn)),
                  attention_mask=jnp.asarray(attn), loss_mask=jnp.asarray(mask),
                  context_mask=context_mask, loss_index=index, loss_weight=weight)


def sft_loss_fn(model_cfg: DecoderConfig, agg: str = "token-mean", chunk: int = 8192,
                context_weight: float = 0.0):
  """(loss_fn, denom_fn) for `make_update`: masked negative log-likelihood of the trained
  tokens, plus `context_weight` x the mean NLL of the context tokens when the batch marks
  them (`make_sft_batch(context=True)`)."""

  def denom(batch: SFTBatch):
    d = agg_denominator(batch.loss_mask, agg)
    if batch.context_mask is None:
      return d
    return d, agg_denominator(batch.context_mask, "token-mean")

  def loss_fn(params, batch: SFTBatch, d):
    if batch.context_mask is not None:
      d, d_ctx = d
      logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                    batch.attention_mask, chunk=chunk)
      nll = aggregate(-logp, batch.loss_mask, agg, d)
      ctx = aggregate(-logp, batch.context_mask, "token-mean", d_ctx)
      return nll + context_weight * ctx, {
          "loss": nll + context_weight * ctx, "nll": nll, "context_nll": ctx,
          "entropy": aggregate(ent, batch.loss_mask, agg, d)}
    if batch.loss_index is not None:
      logp, ent = logprobs_at(model_cfg, params, batch.tokens, batch.loss_index,
                              batch.positions, batch.attention_mask, chunk=chunk)
      mask = batch.loss_weight
    else:
      logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                    batch.attention_mask, chunk=chunk)
      mask = batch.loss_mask
    nll = aggregate(-logp, mask, agg, d)
    return nll, {"loss": nll, "nll": nll, "entropy": aggregate(ent, mask, agg, d)}

  return loss_fn, denom
