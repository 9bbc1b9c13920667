"""The jitted update: loss -> grads accumulated over micro-batches -> one optax step.

`make_update` is generic over the loss (policy, critic, SFT all use it).  Micro-batches are
strided slices of the batch (row i goes to micro-batch i % M), so with the batch sharded over
devices every micro-batch keeps rows on every device.  Loss normalisers are computed once per
row on the whole batch (`ragjax.rl.losses.agg_denominator`) and travel with their rows, which
makes the accumulated gradient equal the full-batch gradient.
"""

from __future__ import annotations

from typing import Callable, Optional

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from ragjax.models.model_config import DecoderConfig
from ragjax.models.sharded import decoder_shardings
from ragjax.parallel import shard
from ragjax.parallel.mesh import replicated
from ragjax.rl.batch import TrainBatch
from ragjax.rl.run_config import RLConfig
from ragjax.rl.logprobs import logprobs_at, sequence_logprobs, sequence_values
from ragjax.rl.losses import (agg_denominator, aggregate, clipped_surrogate, clipped_value_loss,
                              kl_penalty)


class NonFiniteError(FloatingPointError):
  """An update produced a non-finite loss, gradient or parameter; nothing was saved."""


def nonfinite_keys(metrics) -> list[str]:
  """Metrics that are not finite, plus `nonfinite_params` when the update's new params hold any
  NaN/Inf (the guard checks the params it would save, not only the loss)."""
  import math
  bad = [k for k, v in metrics.items() if not math.isfinite(float(v))]
  if float(metrics.get("nonfinite_params", 0)) > 0:
    bad.append("nonfinite_params")
  return bad


@flax.struct.dataclass
class TrainState:
  step: jnp.ndarray
  params: dict
  opt_state: optax.OptState


def init_train_state(params, optimizer: optax.GradientTransformation) -> TrainState:
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=optimizer.init(params))


LossFn = Callable[[dict, object, jnp.ndarray], tuple[jnp.ndarray, dict]]


def policy_loss_fn(model_cfg: DecoderConfig, rl: RLConfig,
                   hidden_fn=None) -> tuple[LossFn, Callable]:
  """Clipped surrogate + KL (k1|k2|k3) as a loss + entropy bonus, on TrainBatch.  `hidden_fn`:
  the forward for the params the loss gets (`ragjax.rl.logprobs.hidden_states`; LoRA's
  adapter-aware one), None for the plain decoder."""

  def denom(batch: TrainBatch):
    if batch.denominator is not None:     # rows cut from a larger batch keep its normalisers
      return batch.denominator
    return agg_denominator(batch.loss_mask, rl.loss_agg, rl.loss_agg_rows)

  def loss_fn(params, batch: TrainBatch, d):
    if batch.loss_index is not None:
      logp, ent = logprobs_at(model_cfg, params, batch.tokens, jnp.maximum(batch.loss_index, 1),
                              batch.positions, batch.attention_mask, chunk=rl.logprob_chunk,
                              temperature=rl.temperature, hidden_fn=hidden_fn)
      return policy_objective(rl, logp, ent, gathered(batch), d)
    logp, ent = sequence_logprobs(model_cfg, params, batch.tokens, batch.positions,
                                  batch.attention_mask, chunk=rl.logprob_chunk,
                                  temperature=rl.temperature, hidden_fn=hidden_fn)
    return policy_objective(rl, logp, ent, batch, d)

  return loss_fn, denom


def gathered(batch: TrainBatch) -> TrainBatch:
  """The per-token fields at `loss_index` ([B, K]); padding entries index position 0, whose
  loss mask is 0.  Row sums of the mask are unchanged, so every aggregation's denominator is."""
  idx = batch.loss_index
  take = lambda x: None if x is None else jnp.take_along_axis(x, idx, axis=1)
  return batch.replace(tokens=take(batch.tokens), positions=take(batch.positions),
                       attention_mask=take(batch.attention_mask), loss_mask=take(batch.loss_mask),
                       advantages=take(batch.advantages), old_logprobs=take(batch.old_logprobs),
                       behaviour_logprobs=take(batch.behaviour_logprobs),
                       ref_logprobs=take(batch.ref_logprobs), returns=take(batch.returns),
                       old_values=take(batch.old_values), critic_mask=take(batch.critic_mask),
                       loss_index=None)


def policy_objective(rl: RLConfig, logp, ent, batch: TrainBatch, d):
  """The loss given per-token log-probs and entropy (separate so tests can differentiate it)."""
  mask = batch.loss_mask
  denom_ = batch.behaviour_logprobs if batch.behaviour_logprobs is not None else batch.old_logprobs
  pg, clipped = clipped_surrogate(logp, denom_, batch.advantages, clip_low=rl.clip_low,
                                  clip_high=rl.clip_high, dual_clip=rl.dual_clip,
                                  clip=rl.clip_ratio)
  agg = lambda x: aggregate(x, mask, rl.loss_agg, d, rl.loss_agg_rows)
  pg_loss = agg(pg)
  entropy = agg(ent)
  loss = pg_loss - rl.entropy_coef * entropy
  metrics = {"pg_loss": pg_loss, "entropy": entropy, "clip_frac": agg(clipped),
             "approx_kl_old": agg(kl_penalty(logp, batch.old_logprobs, "k3")),
             "ratio": agg(jnp.exp(logp - denom_))}
  if rl.needs_reference and not rl.kl_in_reward:
    if batch.ref_logprobs is None:
      raise ValueError("rl.kl_coef != 0 with the KL as a loss needs batch.ref_logprobs")
    kl = agg(kl_penalty(logp, batch.ref_logprobs, rl.kl_estimator))
    loss = loss + rl.kl_coef * kl
    metrics["kl"] = kl
  metrics["loss"] = loss
  return loss, metrics


def value_loss_fn(model_cfg: DecoderConfig, rl: RLConfig) -> tuple[LossFn, Callable]:
  """Clipped value loss for the PPO critic (a Decoder with the value head) over the critic's
  tokens (`batch.critic_mask`, `rl.critic_mask`; the loss mask when None), aggregated by
  `rl.critic_loss_agg` (the policy's `rl.loss_agg` when empty)."""

  agg_mode = rl.critic_loss_agg or rl.loss_agg

  def mask(batch: TrainBatch):
    return batch.loss_mask if batch.critic_mask is None else batch.critic_mask

  def denom(batch: TrainBatch):
    return agg_denominator(mask(batch), agg_mode, rl.loss_agg_rows)

  def loss_fn(params, batch: TrainBatch, d):
    v = sequence_values(model_cfg, params, batch.tokens, batch.positions, batch.attention_mask)
    per_tok, clipped = clipped_value_loss(v, batch.old_values, batch.returns, rl.value_clip)
    loss = aggregate(per_tok, mask(batch), agg_mode, d)
    return loss, {"value_loss": loss,
                  "value_clip_frac": aggregate(clipped, mask(batch), agg_mode, d)}

  return loss_fn, denom


def _split_micro(batch, num_micro: int):
  def split(x):
    if x is None:
      return None
    b = x.shape[0]
    if b % num_micro:
      raise ValueError(f"batch of {b} rows does not split into {num_micro} micro-batches")
    return jnp.swapaxes(x.reshape((b // num_micro, num_micro) + x.shape[1:]), 0, 1)
  return jax.tree.map(split, batch)


def make_update(loss_fn: LossFn, denom_fn: Callable, optimizer: optax.GradientTransformation,
                num_micro: int = 1, combine: Optional[Callable] = None):
  """update(state, batch[, frozen]) -> (state, metrics); pure, jit it with `jit_update`.

  With `combine` (LoRA's `train_combine`: the adapters attached to, or merged into, the base),
  `state.params` are only the trainable params (adapters) and the loss sees
  `combine(state.params, frozen)`: gradients, optimizer state and the update touch the
  trainable part alone, and `frozen` (the base weights) is an input, never donated.
  """

  def update(state: TrainState, batch, frozen=None):
    d = denom_fn(batch)
    lf = loss_fn if combine is None else (
        lambda p, b, dd: loss_fn(combine(p, frozen), b, dd))
    grad_fn = jax.value_and_grad(lf, has_aux=True)
    if num_micro == 1:
      (_, metrics), grads = grad_fn(state.params, batch, d)
    else:
      micro = _split_micro((batch, d), num_micro)     # rows and their normalisers
      zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
      first = jax.tree.map(lambda x: x[0], micro)
      _, m_shape = jax.eval_shape(lambda: grad_fn(state.params, *first))[0]
      m_zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), m_shape)

      def body(carry, mb_d):
        g_acc, m_acc = carry
        (_, m), g = grad_fn(state.params, *mb_d)
        g_acc = jax.tree.map(lambda a, x: a + x.astype(jnp.float32), g_acc, g)
        return (g_acc, jax.tree.map(jnp.add, m_acc, m)), None

      (grads, metrics), _ = jax.lax.scan(body, (zeros, m_zeros), micro)
      grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)
    metrics = dict(metrics)
    metrics["grad_norm"] = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # The NaN guard checks the params it would save, not only the loss (one reduction).
    metrics["nonfinite_params"] = sum(jnp.sum(~jnp.isfinite(p)) for p in jax.tree.leaves(params))
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return update


# --- shardings ---------------------------------------------------------------------------

def batch_shardings(batch, mesh: Mesh):
  """Rows over the batch mesh axes (every TrainBatch array is [B, T])."""
  return jax.tree.map(lambda x: shard.batch_sharding(mesh, x.ndim, x.shape[0]), batch)


def _dict_path(path) -> tuple:
  return tuple(str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey))


def opt_state_shardings(optimizer: optax.GradientTransformation, params, p_shardings, mesh: Mesh):
  """Optimizer-state leaves that mirror a param (Adam mu/nu) take that param's sharding."""
  by_path = {}
  for (path, sh), leaf in zip(jax.tree_util.tree_flatten_with_path(p_shardings)[0],
                              jax.tree.leaves(params)):
    by_path[_dict_path(path)] = (sh, leaf.shape)
  abstract = jax.eval_shape(optimizer.init, params)

  def pick(path, leaf):
    hit = by_path.get(_dict_path(path))
    if hit is not None and hit[1] == leaf.shape:
      return hit[0]
    return replicated(mesh)
  return jax.tree_util.tree_map_with_path(pick, abstract)


def shard_train_state(state: TrainState, cfg: DecoderConfig, mesh: Mesh,
                      optimizer: optax.GradientTransformation, head: str = "lm",
                      param_shardings=None) -> TrainState:
  """Places params by their logical axes (or `param_shardings`, e.g. replicated adapters) and
  the optimizer state alongside them."""
  p_sh = decoder_shardings(cfg, mesh, head) if param_shardings is None else param_shardings
  params = jax.device_put(state.params, p_sh)
  opt_state = jax.device_put(state.opt_state,
                             opt_state_shardings(optimizer, state.params, p_sh, mesh))
  return TrainState(step=jax.device_put(state.step, replicated(mesh)), params=params,
                    opt_state=opt_state)


def place_train_state(state: TrainState, cfg: DecoderConfig, mesh: Optional[Mesh],
                      optimizer: optax.GradientTransformation, head: str = "lm",
                      param_shardings=None) -> TrainState:
  """`shard_train_state` under a mesh; the state unchanged without one."""
  return state if mesh is None else shard_train_state(state, cfg, mesh, optimizer, head,
                                                      param_shardings)


def jit_update(update, state: TrainState, batch, mesh: Optional[Mesh] = None, frozen=None):
  """jax.jit with explicit in/out shardings taken from the placed state (donated) and, when
  the update takes frozen params, from those (not donated)."""
  if mesh is None:
    return jax.jit(update, donate_argnums=(0,))
  state_sh = jax.tree.map(lambda x: x.sharding, state)
  in_sh = (state_sh, batch_shardings(batch, mesh))
  if frozen is not None:
    in_sh += (jax.tree.map(lambda x: x.sharding, frozen),)
  return jax.jit(update, in_shardings=in_sh, out_shardings=(state_sh, replicated(mesh)),
                 donate_argnums=(0,))
