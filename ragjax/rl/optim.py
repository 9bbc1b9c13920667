"""optax AdamW with linear warmup, cosine or constant decay, and global-norm gradient clipping.

Two clocks.  SFT counts optimizer updates (`make_optimizer(cfg)`: the schedule reads optax's
update count).  RL counts RL steps, as verl does (its LR scheduler steps once per RL step,
whatever the number of mini-batch updates in it; warmup = ratio x RL steps): the optimizer
is built with `per_rl_step=True`, the learning rate is a hyperparameter in its state, and the
trainer sets it to `learning_rate_schedule(cfg)(step - 1)` before the updates of RL step
`step` (`with_learning_rate`).  So a step's updates share one learning rate, and a batch whose
row count varies (REX-RAG's kept clones) cannot shift the schedule.
"""

from __future__ import annotations

import jax
import numpy as np
import optax

from ragjax.rl.run_config import OptimConfig


def learning_rate_schedule(cfg: OptimConfig, lr: float | None = None) -> optax.Schedule:
  peak = cfg.lr if lr is None else lr
  warmup = max(cfg.warmup, cfg.min_warmup_steps)
  if cfg.schedule == "cosine":
    decay_steps = max(cfg.total_steps, warmup + 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else peak, peak_value=peak, warmup_steps=warmup,
        decay_steps=decay_steps, end_value=peak * cfg.min_lr_ratio)
  if warmup == 0:
    return optax.constant_schedule(peak)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])


def make_optimizer(cfg: OptimConfig, lr: float | None = None,
                   per_rl_step: bool = False) -> optax.GradientTransformation:
  """AdamW (+ clipping).  per_rl_step: the learning rate lives in the optimizer state and is
  set by the caller (`with_learning_rate`) instead of following the update count."""
  parts = []
  if cfg.grad_clip is not None:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip))
  if per_rl_step:
    # only the learning rate lives in the state; every other argument stays a constant
    adamw = optax.inject_hyperparams(optax.adamw, static_args=("b1", "b2", "eps", "eps_root",
                                                               "weight_decay"))
    first = learning_rate_schedule(cfg, lr)(0)
    parts.append(adamw(learning_rate=first, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                       weight_decay=cfg.weight_decay))
  else:
    parts.append(optax.adamw(learning_rate_schedule(cfg, lr), b1=cfg.b1, b2=cfg.b2,
                             eps=cfg.eps, weight_decay=cfg.weight_decay))
  return optax.chain(*parts)


def with_learning_rate(opt_state, value: float, place=None):
  """`opt_state` of a `per_rl_step` optimizer with its learning rate set to `value`.  `place`
  (array, old leaf) -> array puts the new scalar where the old one lived (a mesh, several
  processes); default: the old leaf's sharding."""
  old = optax.tree_utils.tree_get(opt_state, "learning_rate")
  new = np.asarray(value, old.dtype)
  new = jax.device_put(new, old.sharding) if place is None else place(new, old)
  return optax.tree_utils.tree_set(opt_state, learning_rate=new)


def learning_rate(opt_state) -> float:
  """The learning rate a `per_rl_step` optimizer state holds."""
  return float(np.asarray(optax.tree_utils.tree_get(opt_state, "learning_rate")))
