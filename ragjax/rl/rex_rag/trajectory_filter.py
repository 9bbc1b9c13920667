"""REX-RAG's trajectory filter and its adaptive keep ratio (seeds §1.4, mixed sampling step 5).

After old log-probs are computed, every probe clone is scored by the mean old log-prob of its
inserted prompt tokens; the top keep_num = int(B x G x keep_ratio) clones (rounded down to a
multiple of `multiple_of`, the authors' GPU count) stay, the rest leave the batch.  Originals
always stay.  keep_ratio is pandas' ewm(alpha, adjust=False) over the history
[initial keep_ratio, kept-probe accuracy of step 1, of step 2, ...]: y_0 = h_0,
y_k = (1 - alpha) y_(k-1) + alpha h_k.  A step that keeps no clone adds nothing to the history
(there is no accuracy to record).  The history lives in the method state, so a resumed run
filters exactly as the uninterrupted one.

Accuracy is EM of the row's answer against its record's gold answers (the paper's reward >= 1
with its pure-EM reward; the same test the clone hook uses to call an answer wrong).  The filter
also writes this step's record (z = 1 - original accuracy, a, counts) for the behaviour plug-in
and the metric.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from ragjax import registry
from ragjax.metrics import exact_match
from ragjax.rl.rex_rag.correction import STATE_KEY, inserted_span

HOOK = "rex_rag_clone"    # the clone hook's counter prefix in RolloutBatch.stats


def ewm(history: Sequence[float], alpha: float) -> float:
  """The last value of pandas' Series(history).ewm(alpha=alpha, adjust=False).mean()."""
  y = float(history[0])
  for x in history[1:]:
    y = (1.0 - alpha) * y + alpha * float(x)
  return y


def correct(ctx) -> np.ndarray:
  """[R] 1.0 where a row's answer is an exact match of its record's gold answers."""
  return np.asarray([exact_match(row.answer or "", ex["golden_answers"])
                     for row, ex in zip(ctx.rows, ctx.examples)], np.float64)


def prompt_scores(ctx, clones: Sequence[int]) -> np.ndarray:
  """Mean old log-prob of each clone's inserted prompt tokens."""
  labels = np.asarray(ctx.rollout.traj.labels)
  old = np.asarray(ctx.old_logprobs, np.float64)
  out = []
  for i in clones:
    start, end = inserted_span(labels[i], i)
    out.append(old[i, start:end].mean())
  return np.asarray(out, np.float64)


@dataclasses.dataclass
class TrajectoryFilter:
  keep_ratio: float = 0.08         # the history's first value (0.12 in the DAPO scripts)
  alpha: float = 0.1
  enabled: bool = True             # False: keep every clone (the "w/o TF" ablation)
  multiple_of: int = 1
  adaptive: bool = True            # False: keep_ratio stays at its first value (Table 4's fixed
                                   # share reading); True: the authors' code's EWM

  def __post_init__(self):
    if not 0.0 <= self.keep_ratio <= 1.0 or not 0.0 < self.alpha <= 1.0:
      raise ValueError(f"keep_ratio must be in [0, 1] and alpha in (0, 1], got "
                       f"{self.keep_ratio}, {self.alpha}")
    if self.multiple_of < 1:
      raise ValueError(f"multiple_of must be >= 1, got {self.multiple_of}")

  def __call__(self, ctx, state: dict) -> list[int]:
    if ctx.rl.use_sampler_logprobs and "injected" not in ctx.rl.train_on:
      raise ValueError("the REX-RAG trajectory filter ranks clones by the old log-probs of "
                       "their inserted prompt, which the sampler did not generate and a row "
                       "is re-scored for only when it trains on it: set rl.train_on to hold "
                       "'injected', or rl.use_sampler_logprobs=False")
    rec = state.setdefault(STATE_KEY, {})
    history = rec.setdefault("keep_history", [self.keep_ratio])
    keep_ratio = ewm(history, self.alpha) if self.adaptive else float(history[0])
    rows = ctx.rows
    originals = [i for i, r in enumerate(rows) if r.clone_of is None]
    clones = [i for i, r in enumerate(rows) if r.clone_of is not None]
    if not originals:
      raise ValueError("the REX-RAG trajectory filter got a batch without original rows")
    base = ctx.num_prompts * ctx.group_size
    keep_num = int(base * keep_ratio) // self.multiple_of * self.multiple_of
    if not self.enabled:
      kept = list(clones)
    else:
      order = np.argsort(-prompt_scores(ctx, clones), kind="stable")
      kept = sorted(clones[k] for k in order[:keep_num])
    ok = correct(ctx)
    acc_probe = float(ok[kept].mean()) if kept else None
    if acc_probe is not None:
      history.append(acc_probe)
    acc_orig = float(ok[originals].mean())
    stats = ctx.rollout.stats
    rec["step"] = {
        "step": ctx.step, "rows": len(originals) + len(kept), "originals": len(originals),
        "eligible": int(stats.get(f"{HOOK}/eligible", 0)), "clones_made": len(clones),
        "overflow": int(stats.get(f"{HOOK}/overflow", 0)), "clones_kept": len(kept),
        "keep_ratio": keep_ratio, "keep_num": keep_num, "acc_original": acc_orig,
        "acc_probe": acc_probe,
        "acc_probe_made": float(ok[clones].mean()) if clones else None,
        "z": 1.0 - acc_orig, "a": len(kept) / (len(originals) + len(kept))}
    return sorted(originals + kept)


@registry.register("batch_filter", "rex_rag")
def rex_rag_filter(tokenizer=None, keep_ratio: float = 0.08, alpha: float = 0.1,
                   enabled: bool = True, multiple_of: int = 1,
                   adaptive: bool = True) -> TrajectoryFilter:
  """REX-RAG's trajectory filter: keep the clones whose inserted prompt is likeliest.

  Config entry point: `rl.batch_filter = "rex_rag"`, `rl.batch_filter_kwargs = {
  "keep_ratio": 0.08, "alpha": 0.1, "enabled": True, "multiple_of": 1, "adaptive": True}`."""
  del tokenizer   # the filter reads token ids and labels only
  return TrajectoryFilter(keep_ratio=keep_ratio, alpha=alpha, enabled=enabled,
                          multiple_of=multiple_of, adaptive=adaptive)
