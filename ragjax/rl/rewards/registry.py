"""The rewards registry: name -> function(response_text, golden_answers, metadata) -> float | list[float].

A reward returning a list gives one value per step (R3-RAG's step samples, ReZero's per-turn
terms); scalars are outcome rewards and land on the last step.  `metadata` carries whatever the
rollout recorded about the trajectory (queries, retrieved doc ids, refine text, step texts), so a
method adds its reward here without touching the trainer.  User rewards bind through gin:
`user_rewards.rewards = {"mine": @my_reward}` in a `--gin_file`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import gin

RewardValue = Union[float, Sequence[float]]
RewardFn = Callable[..., RewardValue]

_REGISTRY: dict[str, RewardFn] = {}


def register_reward(name: str):
  """Decorator: adds a reward under `name` (names are unique)."""
  def wrap(fn: RewardFn) -> RewardFn:
    if name in _REGISTRY and _REGISTRY[name] is not fn:
      raise ValueError(f"reward {name!r} is already registered (by {_REGISTRY[name].__module__})")
    _REGISTRY[name] = fn
    return fn
  return wrap


@gin.configurable
def user_rewards(rewards: Optional[Mapping[str, RewardFn]] = None) -> dict[str, RewardFn]:
  """Rewards bound with gin; they shadow nothing (a clash with a built-in name is an error)."""
  return dict(rewards or {})


def get_reward(name: str) -> RewardFn:
  extra = user_rewards()
  clash = set(extra) & set(_REGISTRY)
  if clash:
    raise ValueError(f"gin-bound user rewards {sorted(clash)} clash with built-in rewards")
  table = {**_REGISTRY, **extra}
  if name not in table:
    raise KeyError(f"unknown reward {name!r}; registered: {sorted(table)}")
  return table[name]


def registered_rewards() -> list[str]:
  return sorted({**_REGISTRY, **user_rewards()})


@dataclasses.dataclass
class RewardResult:
  """One trajectory's reward: the total, its per-step split and each named component."""
  total: float
  per_step: list[float]
  components: dict[str, float]


def combine_rewards(weights: Mapping[str, float], response_text: str, golden_answers,
                    metadata: Optional[Mapping[str, Any]] = None,
                    kwargs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                    num_steps: Optional[int] = None, record: str = "?") -> RewardResult:
  """Weighted sum of named rewards; per-step rewards add step-wise, scalars add to the last step."""
  metadata = dict(metadata or {})
  kwargs = kwargs or {}
  steps = num_steps or int(metadata.get("num_steps", 1)) or 1
  per_step = [0.0] * steps
  components = {}
  for name, weight in weights.items():
    fn = get_reward(name)
    try:
      value = fn(response_text, golden_answers, metadata, **dict(kwargs.get(name, {})))
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
