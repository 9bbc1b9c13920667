"""Dynamic sampling (DAPO's `filter_groups`): train only on groups whose rollouts disagree.

    c.rl.batch_filter = "filter_groups"
    c.rl.batch_filter_kwargs = {"metric": "em", "target_groups": 8, "max_batches": 3}

A group whose G rollouts all score the same has every GRPO advantage 0: it adds no gradient,
only cost (the update is paid per row).  The filter keeps the groups whose chosen score varies
(`metric`: "reward", the row's total reward; or "em" / "f1" / "cover_em" of its answer against
the question's gold answers), drops the rest before advantages and the update, and, with
`target_groups` > 0, asks the trainer to roll out `trainer.batch_prompts` more questions
(`shortfall`) until that many groups are kept or `max_batches` generation batches have run
(DAPO's `max_num_gen_batches`); the kept groups beyond the target are dropped, so each update
sees at most `target_groups` groups.  A step that keeps no group skips its update with one
logged line.  The counts are logged per step (`filter/*`).

This is DAPO's recipe (Yu et al. 2025, `recipe/dapo` in verl: `filter_groups.enable`,
`metric`, `max_num_gen_batches`); none of the five methods' own configs turn it on (their
ledgers say so).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ragjax import registry
from ragjax.metrics import answer_metrics

METRICS = ("reward", "em", "f1", "cover_em")


class GroupFilter:
  """The batch filter (`__call__`) and the trainer's resampling test (`shortfall`)."""

  def __init__(self, metric: str = "reward", target_groups: int = 0, max_batches: int = 1,
               tolerance: float = 1e-6):
    for name, value in (("target_groups", target_groups), ("max_batches", max_batches)):
      if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"rl.batch_filter_kwargs.{name} must be an integer, got {value!r}")
    if metric not in METRICS:
      raise ValueError(f"rl.batch_filter_kwargs.metric={metric!r}; known: {METRICS}")
    if target_groups < 0:
      raise ValueError(f"rl.batch_filter_kwargs.target_groups must be >= 0 (0: no "
                       f"resampling), got {target_groups}")
    if max_batches < 1:
      raise ValueError(f"rl.batch_filter_kwargs.max_batches must be >= 1, got {max_batches}")
    if target_groups == 0 and max_batches > 1:
      raise ValueError("rl.batch_filter_kwargs.max_batches > 1 resamples towards "
                       "target_groups: set target_groups > 0")
    self.metric, self.target_groups = metric, int(target_groups)
    self.max_batches, self.tolerance = int(max_batches), float(tolerance)
    self.last: dict = {}

  def scores(self, rows, rewards, examples: Sequence[Mapping]) -> np.ndarray:
    """The score each row's group is judged on."""
    if self.metric == "reward":
      return np.asarray(rewards, np.float64)
    return np.asarray([answer_metrics(row.answer, ex["golden_answers"])[self.metric]
                       for row, ex in zip(rows, examples)], np.float64)

  def varied_groups(self, rows, rewards, examples: Sequence[Mapping]) -> list[int]:
    """The group ids (in order of first appearance) whose scores are not all equal."""
    s = self.scores(rows, rewards, examples)
    by_group: dict[int, list[float]] = {}
    for row, v in zip(rows, s):
      by_group.setdefault(int(row.group_id), []).append(float(v))
    return [g for g, v in by_group.items() if max(v) - min(v) > self.tolerance]

  def shortfall(self, rows, rewards, examples: Sequence[Mapping]) -> int:
    """Groups still wanted before the update (0: enough, or no target)."""
    if not self.target_groups:
      return 0
    return max(0, self.target_groups - len(self.varied_groups(rows, rewards, examples)))

  def __call__(self, ctx, state) -> list[int]:
    del state
    rows = ctx.rows
    groups = self.varied_groups(rows, ctx.rewards, ctx.examples)
    total = len({int(r.group_id) for r in rows})
    varied = len(groups)
    if self.target_groups:
      groups = groups[:self.target_groups]
    keep_ids = set(groups)
    keep = [i for i, r in enumerate(rows) if int(r.group_id) in keep_ids]
    self.last = {"filter/groups": float(total), "filter/varied_groups": float(varied),
                 "filter/kept_groups": float(len(groups)),
                 "filter/kept_fraction": float(varied / max(total, 1))}
    return keep


@registry.register("batch_filter", "filter_groups")
def filter_groups(tokenizer=None, metric: str = "reward", target_groups: int = 0,
                  max_batches: int = 1) -> GroupFilter:
  """DAPO's dynamic sampling: keep groups whose `metric` varies; resample to `target_groups`.

  Config entry point: `rl.batch_filter = "filter_groups"`, `rl.batch_filter_kwargs = {
  "metric": "reward" | "em" | "f1" | "cover_em", "target_groups": 0, "max_batches": 1}`."""
  del tokenizer
  return GroupFilter(metric=metric, target_groups=target_groups, max_batches=max_batches)
