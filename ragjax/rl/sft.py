"""Supervised fine-tuning (cold start) on trajectories with loss masks, via the RL step machinery.

Same chunked log-probs, same `make_update` (micro-batches, sharding, optax), so SFT and RL share
one tested path.  Only the loss differs: masked token cross-entropy.  `run_sft` is the loop
(bucketed batches, logging, checkpoints) every recipe with a cold start uses.

With `ckpt_dir`, the loop saves an orbax checkpoint every `sft.save_every` steps (train state
and the batch sampler's RNG state) and a restarted run resumes from the last one: the same
batches follow, so a killed SFT finishes with the params an uninterrupted one would have, and
its metrics log is trimmed to the checkpoint (tested).  A checkpoint written under another
cold-start config is refused naming the fields (`fingerprint`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models.model_config import DecoderConfig
from ragjax.models.sharded import decoder_shardings
from ragjax.rl.batch import trained_positions
from ragjax.rl.checkpoint import Checkpointer, ConfigMismatchError
from ragjax.rl.run_config import OptimConfig
from ragjax.rl.logprobs import logprobs_at, sequence_logprobs
from ragjax.rl.losses import agg_denominator, aggregate
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.optim import make_optimizer
from ragjax.rl.train_step import (NonFiniteError, init_train_state, jit_update, make_update,
                                  nonfinite_keys, place_train_state)
from ragjax.rl.masks import DEFAULT_TRAIN_ON, attention_mask, loss_mask, positions
from ragjax.rollout.labels import LABEL_DTYPE, Source
from ragjax.rollout.trajectory import pad_rows
from ragjax.parallel.buckets import pick_bucket
from ragjax.parallel.mesh import replicated


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
                   gather: bool = False, context: bool = False) -> SFTBatch:
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
  attn = attention_mask(labels)
  mask = loss_mask(labels, train_on)
  index = weight = context_mask = None
  if context:
    context_mask = ((attn > 0) & (mask == 0)).astype(np.float32)
    context_mask[:, 0] = 0.0
    context_mask = jnp.asarray(context_mask)
  elif gather:
    index = trained_positions(mask)
    weight = np.take_along_axis(mask, index, axis=1)     # 0 on the padding (position 0)
    index, weight = jnp.asarray(np.maximum(index, 1)), jnp.asarray(weight)
  return SFTBatch(tokens=jnp.asarray(tokens), positions=jnp.asarray(positions(labels)),
                  attention_mask=jnp.asarray(attn), loss_mask=jnp.asarray(mask),
                  context_mask=context_mask, loss_index=index, loss_weight=weight)


def sft_loss_fn(model_cfg: DecoderConfig, agg: str = "token-mean", chunk: int = 8192,
                context_weight: float = 0.0, hidden_fn=None):
  """(loss_fn, denom_fn) for `make_update`: masked negative log-likelihood of the trained
  tokens, plus `context_weight` x the mean NLL of the context tokens when the batch marks
  them (`make_sft_batch(context=True)`).  `hidden_fn`: the forward for the params the loss
  gets (LoRA's adapter-aware one), None for the plain decoder."""

  def denom(batch: SFTBatch):
    d = agg_denominator(batch.loss_mask, agg)
    if batch.context_mask is None:
      return d
    return d, agg_denominator(batch.context_mask, "token-mean")

  def loss_fn(params, batch: SFTBatch, d):
    if batch.context_mask is not None:
      d, d_ctx = d
      logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                    batch.attention_mask, chunk=chunk, hidden_fn=hidden_fn)
      nll = aggregate(-logp, batch.loss_mask, agg, d)
      ctx = aggregate(-logp, batch.context_mask, "token-mean", d_ctx)
      return nll + context_weight * ctx, {
          "loss": nll + context_weight * ctx, "nll": nll, "context_nll": ctx,
          "entropy": aggregate(ent, batch.loss_mask, agg, d)}
    if batch.loss_index is not None:
      logp, ent = logprobs_at(model_cfg, params, batch.tokens, batch.loss_index,
                              batch.positions, batch.attention_mask, chunk=chunk,
                              hidden_fn=hidden_fn)
      mask = batch.loss_weight
    else:
      logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                    batch.attention_mask, chunk=chunk, hidden_fn=hidden_fn)
      mask = batch.loss_mask
    nll = aggregate(-logp, mask, agg, d)
    return nll, {"loss": nll, "nll": nll, "entropy": aggregate(ent, mask, agg, d)}

  return loss_fn, denom


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """The cold-start SFT loop: AdamW, linear warmup then cosine to `min_lr_ratio` x lr."""
  steps: int = 0                      # 0 = no SFT stage
  batch_size: int = 32
  lr: float = 5e-3
  warmup_steps: int = 40
  min_lr_ratio: float = 0.1
  weight_decay: float = 0.01
  gather: bool = True                 # project only trained positions (same loss)
  context_weight: float = 0.0         # LM auxiliary on prompt and documents (see sft_loss_fn)
  log_every: int = 10
  save_every: int = 100               # checkpoint cadence when the recipe gives a ckpt_dir; 0: never

  def __post_init__(self):
    for name, low in (("steps", 0), ("batch_size", 1), ("warmup_steps", 0), ("log_every", 1),
                      ("save_every", 0)):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    for name, strict, high in (("lr", True, math.inf), ("min_lr_ratio", False, 1.0),
                               ("weight_decay", False, math.inf),
                               ("context_weight", False, math.inf)):
      v = getattr(self, name)
      if not (math.isfinite(v) and (v > 0 if strict else v >= 0) and v <= high):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} 0"
                         + (f" and <= {high:g}" if high != math.inf else "") + f", got {v}")


def run_sft(model_cfg: DecoderConfig, params, rows_t: Sequence[np.ndarray],
            rows_l: Sequence[np.ndarray], sft: SFTConfig, widths: Sequence[int], *, seed: int,
            log_path: str, progress: bool = True, mesh=None, ckpt_dir: Optional[str] = None,
            fingerprint: Optional[Mapping[str, Any]] = None, adapter=None):
  """SFT on unpadded trajectories (tokens, labels per row); returns (params, history).

  With `adapter` (e.g. `ragjax.models.lora.LoraAdapter`, as the RL trainer takes it) only the
  adapter's trainable params are optimised and checkpointed, the base is a frozen input of the
  update, and the returned params are the two combined (a plain param tree: the RL stage puts
  fresh adapters on top of it).

  Batches are drawn from one width bucket at a time (chosen in proportion to its size), so
  short traces are not padded to the longest and each width compiles once.  Metrics go to
  `log_path` (JSONL) every `log_every` steps; `history` is every logged record of the run,
  including those of the steps before a resume."""
  import tqdm
  optim = OptimConfig(lr=sft.lr, schedule="cosine", warmup_steps=sft.warmup_steps,
                      min_lr_ratio=sft.min_lr_ratio, total_steps=sft.steps,
                      weight_decay=sft.weight_decay, grad_clip=1.0)
  optimizer = make_optimizer(optim)
  frozen, combine, hidden_fn = (), None, None
  if adapter is not None:
    params, base = adapter.split(params)
    frozen, combine, hidden_fn = (base,), adapter.train_combine, adapter.hidden_fn(model_cfg)
    if mesh is not None:
      frozen = (jax.device_put(base, decoder_shardings(model_cfg, mesh)),)
    state = place_train_state(init_train_state(params, optimizer), model_cfg, mesh, optimizer,
                              param_shardings=None if mesh is None else jax.tree.map(
                                  lambda _: replicated(mesh), params))
  else:
    state = place_train_state(init_train_state(params, optimizer), model_cfg, mesh, optimizer)
  loss_fn, denom = sft_loss_fn(model_cfg, context_weight=sft.context_weight,
                               hidden_fn=hidden_fn)
  updates = {}
  rng = np.random.default_rng(seed)
  widths = tuple(sorted(widths))
  width_of = np.asarray([pick_bucket(widths, len(t), f"trace {i}") for i, t in enumerate(rows_t)])
  buckets = {w: np.flatnonzero(width_of == w) for w in np.unique(width_of)}
  names = sorted(buckets)
  probs = np.asarray([len(buckets[w]) for w in names], np.float64)
  probs /= probs.sum()
  log = MetricsLog(log_path)
  ckpt = first = None
  if ckpt_dir and sft.save_every > 0:
    ckpt = Checkpointer(ckpt_dir, dict(fingerprint or {}, **{"sft.rows": len(rows_t)}),
                        max_to_keep=1)
    try:                      # resume: the state, and the sampler's RNG where it stood
      first, restored, extra = ckpt.restore_intact(state)
    except ConfigMismatchError as e:
      raise ConfigMismatchError(f"{e}. This is a killed cold start's SFT under another config: "
                                f"delete {ckpt_dir} to train it afresh") from None
    if first is not None:
      state = restored
      rng.bit_generator.state = extra["rng"]
  log.truncate(first)         # drops the lines of steps past the checkpoint (all when none)
  history = log.read()
  try:
    for step in tqdm.trange((first or 0) + 1, sft.steps + 1, desc="sft", disable=not progress,
                            initial=first or 0, total=sft.steps):
      width = names[rng.choice(len(names), p=probs)]
      idx = rng.choice(buckets[width], sft.batch_size)
      batch = make_sft_batch(pad_rows([rows_t[i] for i in idx], width, 0, np.int32),
                             pad_rows([rows_l[i] for i in idx], width, Source.PAD, LABEL_DTYPE),
                             gather=sft.gather, context=sft.context_weight > 0)
      shape = (width, None if batch.loss_index is None else batch.loss_index.shape[1])
      if shape not in updates:
        updates[shape] = jit_update(make_update(loss_fn, denom, optimizer, 1, combine), state,
                                    batch, mesh, *frozen)
      state, m = updates[shape](state, batch, *frozen)
      saving = ckpt is not None and (step % sft.save_every == 0) and step < sft.steps
      if step % sft.log_every == 0 or step == sft.steps or saving:
        rec = {"step": step, **{k: float(v) for k, v in jax.device_get(m).items()}}
        bad = nonfinite_keys(rec)
        if bad:    # never hand non-finite weights on (the caller would export them)
          raise NonFiniteError(f"SFT step {step}: non-finite {bad} "
                               f"({ {k: rec[k] for k in bad} }); lower sft.lr")
        if step % sft.log_every == 0 or step == sft.steps:
          history.append(rec)
          log.append(rec)
      if saving:
        ckpt.save(step, state, {"rng": rng.bit_generator.state})
  finally:
    if ckpt is not None:
      ckpt.wait()
      ckpt.close()
  if adapter is not None:
    return jax.jit(adapter.combine)(state.params, frozen[0]), history
  return state.params, history
