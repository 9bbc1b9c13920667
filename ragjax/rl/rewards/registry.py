"""Rewards: functions of one row's record, registered by name in `ragjax.registry` ("reward").

    @register_reward("em")
    def em_reward(ctx: RewardContext, **kwargs) -> float | list[float]: ...

`ctx.row` is the rollout's metadata record of the trajectory (parsed answer, queries, retrieved
ids and texts, per-turn spans, protocol fields such as refine text or fallback counts),
`ctx.example` the dataset record it answers (gold answers, question type, task) and `ctx.step`
the training step (0 in evaluation), so a method adds a reward here without touching the
trainer.  A reward returning a list gives one value per step (turn) of the row (R3-RAG's step
samples, ReZero's per-turn terms); scalars are outcome rewards and land on the last step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

from ragjax import registry

RewardValue = Union[float, Sequence[float]]


@dataclasses.dataclass(frozen=True)
class RewardContext:
  row: Any                          # ragjax.rollout.trajectory.RowMeta
  example: Mapping[str, Any]        # the dataset record (golden_answers, metadata, ...)
  step: int = 0                     # training step (0 outside training)

  @property
  def golden_answers(self):
    return self.example["golden_answers"]

  @property
  def answer(self) -> Optional[str]:
    return self.row.answer


def register_reward(name: str):
  """Decorator: registers fn(ctx, **kwargs) as reward `name`."""
  return registry.register("reward", name)


def get_reward(name: str):
  return registry.lookup("reward", name)


def registered_rewards() -> list[str]:
  return registry.names("reward")


@dataclasses.dataclass
class RewardResult:
  """One trajectory's reward: the total, its per-step split and each named component."""
  total: float
  per_step: list[float]
  components: dict[str, float]


def combine_rewards(weights: Mapping[str, float], ctx: RewardContext,
                    kwargs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                    record: str = "?") -> RewardResult:
  """Weighted sum of named rewards; per-step rewards add step-wise, scalars add to the last
  step.  A reward that raises is reported with the reward's name and the record's id."""
  kwargs = kwargs or {}
  steps = max(int(ctx.row.num_steps), 1)
  per_step = [0.0] * steps
  components = {}
  for name, weight in weights.items():
    fn = get_reward(name)
    try:
      value = fn(ctx, **dict(kwargs.get(name, {})))
    except Exception as e:  # name the record and reward so bad data is findable
      raise ValueError(f"reward {name!r} failed on record {record}: {e}") from e
    if isinstance(value, (list, tuple)):
      if len(value) != steps:
        raise ValueError(f"reward {name!r} returned {len(value)} per-step values for record "
                         f"{record}, which has {steps} steps")
      for i, v in enumerate(value):
        per_step[i] += weight * float(v)
      components[name] = float(sum(value))
    else:
      per_step[-1] += weight * float(value)
      components[name] = float(value)
  return RewardResult(total=float(sum(per_step)), per_step=per_step, components=components)
