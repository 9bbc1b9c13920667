"""optax AdamW with linear warmup, cosine or constant decay, and global-norm gradient clipping."""

from __future__ import annotations

import optax

from ragjax.rl.config import OptimConfig


def learning_rate_schedule(cfg: OptimConfig, lr: float | None = None) -> optax.Schedule:
  peak = cfg.lr if lr is None else lr
  warmup = cfg.warmup
  if cfg.schedule == "cosine":
    decay_steps = max(cfg.total_steps, warmup + 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else peak, peak_value=peak, warmup_steps=warmup,
        decay_steps=decay_steps, end_value=peak * cfg.min_lr_ratio)
  if warmup == 0:
    return optax.constant_schedule(peak)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])


def make_optimizer(cfg: OptimConfig, lr: float | None = None) -> optax.GradientTransformation:
  parts = []
  if cfg.grad_clip is not None:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip))
  parts.append(optax.adamw(learning_rate_schedule(cfg, lr), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                           weight_decay=cfg.weight_decay))
  return optax.chain(*parts)
