"""The metrics of one RL step's batch: rewards, answers, lengths, token counts, the engine's
counters, each reward component, the registered metric plug-ins (`rl.metrics`) and the
signature metrics (`rl.signatures`)."""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Optional, Sequence

import numpy as np

from ragjax.metrics import answer_metrics
from ragjax.rl.step_batch import StepBatch
from ragjax.rl.signatures import signature_metrics
from ragjax.rl.step_context import StepContext
from ragjax.rollout.labels import Source


def step_metrics(sb: StepBatch, ctx: StepContext, *, reward_names: Sequence[str],
                 metric_fns: Mapping[str, Callable], wants_ctx: Collection[str] = (),
                 signatures: Sequence[str] = (),
                 score_s: float = 0.0, generated: Optional[int] = None) -> dict:
  """The step's metrics on the batch's (kept) rows.  `wants_ctx`: the plug-ins called with
  `ctx=`; `score_s`: the scoring forwards' time; `generated`: the rows before a batch filter
  (None: no filter ran)."""
  rows, examples, rewards = sb.rows, ctx.examples, sb.rewards
  ans = [answer_metrics(row.answer, ex["golden_answers"]) for row, ex in zip(rows, examples)]
  stats = {"reward": float(rewards.mean()), "reward_std": float(rewards.std()),
           "em": float(np.mean([a["em"] for a in ans])),
           "f1": float(np.mean([a["f1"] for a in ans])),
           "response_length": float((sb.labels == Source.POLICY).sum(1).mean()),
           "searches_per_traj": float(np.mean([row.num_searches for row in rows])),
           "trajectories": len(rows), "tokens": int(sb.attention_mask.sum()),
           "positions": int(sb.tokens.size), "trained_tokens": int(sb.loss_mask.sum()),
           "time/logprob_s": score_s}
  if sb.samples is not None:
    stats["step_samples"] = int((sb.samples.row >= 0).sum())
  if generated is not None:
    stats["trajectories_generated"] = generated
  stats.update({f"rollout/{k}": float(v) for k, v in sb.rollout.stats.items()})  # hook counters
  for name in reward_names:
    stats[f"reward/{name}"] = float(np.mean([r.components[name] for r in sb.results]))
  for name, fn in metric_fns.items():
    out = fn(rows, examples, ctx=ctx) if name in wants_ctx else fn(rows, examples)
    stats.update({f"{name}/{k}": float(v) for k, v in out.items()})
  stats.update(signature_metrics(signatures, rows, examples))
  return stats
