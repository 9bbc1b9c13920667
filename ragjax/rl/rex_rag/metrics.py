"""REX-RAG's per-step metric: what the clone hook, the filter and the correction did.

From the step record the trajectory filter writes (method state) and the step's arrays:
  eligible, clones_made, clones_kept, overflow   wrong answers that could be cloned, clones
                                                 made, kept, and skipped for want of spare rows
  keep_ratio, keep_num, z, a                     the filter's ratio and count, Eq. 12's z, the
                                                 mixture weight a
  acc_original, acc_probe, acc_probe_made        EM of originals, of kept clones, of all clones
  max_group                                      the largest GRPO group (G + its kept clones)
  rescued                                        of the groups whose originals all answered
                                                 wrong, the share with a right kept probe
                                                 (REX-RAG's dead ends escaped; issue 42)
  mu_over_old/<segment>                          mean mu / pi_old over the trained tokens of
                                                 each segment (original, origin, prompt,
                                                 continuation), when a behaviour is set
  ratio_at_old                                   token mean of pi_old / mu over trained tokens:
                                                 the ratio of the step's first (on-policy) update
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np

from ragjax import registry
from ragjax.metrics import answer_metrics
from ragjax.rl.rex_rag.correction import SEGMENTS, STATE_KEY, segment_kinds

RECORD_KEYS = ("eligible", "clones_made", "clones_kept", "overflow", "keep_ratio", "keep_num",
               "z", "a", "acc_original", "acc_probe", "acc_probe_made")


def rescued_groups(rows, examples) -> Optional[float]:
  """Of the groups whose original rows all answered wrong (EM 0), the share in which a probe
  clone among `rows` answered right; None when no group was all wrong."""
  groups: dict = {}
  for row, ex in zip(rows, examples):
    right = bool(answer_metrics(row.answer, ex["golden_answers"])["em"])
    g = groups.setdefault(row.group_id, {"original": [], "probe": []})
    g["original" if row.clone_of is None else "probe"].append(right)
  dead = [g for g in groups.values() if g["original"] and not any(g["original"])]
  return sum(any(g["probe"]) for g in dead) / len(dead) if dead else None


@registry.register("metric", "rex_rag")
def rex_rag_metrics(rows, examples, ctx) -> dict:
  """REX-RAG per step: clones made / kept / overflowed, keep ratio, z, a, accuracies, mu / pi_old."""
  out = {}
  record = ctx.method_state.get(STATE_KEY, {}).get("step") or {}
  for key in RECORD_KEYS:
    if record.get(key) is not None:
      out[key] = float(record[key])
  out["max_group"] = float(max(Counter(r.group_id for r in rows).values()))
  rescued = rescued_groups(rows, examples)
  if rescued is not None:
    out["rescued"] = rescued
  if ctx.behaviour_logprobs is not None:
    t = ctx.rollout.traj
    labels = np.asarray(t.labels)
    log_ratio = (np.asarray(ctx.behaviour_logprobs, np.float64)
                 - np.asarray(ctx.old_logprobs, np.float64))
    trained = np.asarray(ctx.loss_mask) > 0
    kinds = np.stack([segment_kinds(labels[i], int(t.prompt_lengths[i]), int(t.lengths[i]),
                                    row.clone_of is not None, i) for i, row in enumerate(rows)])
    for kind, name in SEGMENTS.items():
      sel = trained & (kinds == kind)
      if sel.any():
        out[f"mu_over_old/{name}"] = float(np.exp(log_ratio[sel]).mean())
    if trained.any():
      out["ratio_at_old"] = float(np.exp(-log_ratio[trained]).mean())
  return out
