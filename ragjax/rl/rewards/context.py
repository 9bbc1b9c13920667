"""What a reward reads (`RewardContext`) and how the rewards a config names are scored
(`score_rows`).  Rewards register by name in `ragjax.registry`, like every plug-in:

    @registry.register("reward", "em")
    def em_reward(ctx: RewardContext, **kwargs) -> float | list[float]: ...

`ctx.row` is the rollout's metadata record of the trajectory (parsed answer, queries, retrieved
ids and texts, per-turn spans, protocol fields such as refine text or fallback counts),
`ctx.example` the dataset record it answers (gold answers, question type, task) and `ctx.step`
the training step (0 in evaluation), so a method adds a reward here without touching the
trainer.  A reward returning a list gives one value per step (turn) of the row (R3-RAG's step
samples, ReZero's per-turn terms); scalars are outcome rewards and land on the last step.

`ctx.services` holds the model services the recipe built from the config (`{"judge":
ChatModel}`, ...).  A reward that calls a model should score the whole batch in one request: it
may carry a `batch(ctxs, **kwargs) -> list` attribute (see `batched_reward`), which
`score_rows` calls once per step instead of the function once per row.
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
  services: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # {"judge": ChatModel}

  def service(self, name: str):
    """The recipe-built service `name`, or an error saying which config section builds it."""
    if name not in self.services:
      raise KeyError(f"this reward needs the {name!r} service, which the run did not build "
                     f"(set the config's `{name}` section; built: {sorted(self.services)})")
    return self.services[name]

  @property
  def golden_answers(self):
    return self.example["golden_answers"]

  @property
  def answer(self) -> Optional[str]:
    return self.row.answer


def batched_reward(batch_fn):
  """Decorator for a reward scored a batch at a time: `batch_fn(ctxs, **kwargs) -> values`
  becomes a per-row reward (`fn(ctx)` = `batch_fn([ctx])[0]`) that carries `.batch`."""
  def one(ctx, **kwargs):
    return batch_fn([ctx], **kwargs)[0]
  one.batch = batch_fn
  one.__name__, one.__doc__ = batch_fn.__name__, batch_fn.__doc__
  one.__module__ = batch_fn.__module__
  one.__wrapped__ = batch_fn     # its keyword arguments are batch_fn's (the config check reads them)
  return one


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
  return score_rows(weights, [ctx], kwargs, [record])[0]


def score_rows(weights: Mapping[str, float], ctxs: Sequence[RewardContext],
               kwargs: Optional[Mapping[str, Mapping[str, Any]]] = None,
               records: Optional[Sequence[str]] = None) -> list[RewardResult]:
  """`combine_rewards` for every row of a batch; a reward with `.batch` is called once for all
  rows (one judge request per step), the others once per row."""
  kwargs = kwargs or {}
  records = [str(i) for i in range(len(ctxs))] if records is None else list(records)
  steps = [max(int(c.row.num_turns), 1) for c in ctxs]
  per_step = [[0.0] * n for n in steps]
  components: list[dict] = [{} for _ in ctxs]
  for name, weight in weights.items():
    fn = get_reward(name)
    kw = dict(kwargs.get(name, {}))
    if hasattr(fn, "batch") and ctxs:
      try:
        values = list(fn.batch(list(ctxs), **kw))
      except Exception as e:  # name the reward and the batch's records
        raise ValueError(f"reward {name!r} failed on records {records}: {e}") from e
      if len(values) != len(ctxs):
        raise ValueError(f"reward {name!r} returned {len(values)} values for {len(ctxs)} rows")
    else:
      values = []
      for ctx, record in zip(ctxs, records):
        try:
          values.append(fn(ctx, **kw))
        except Exception as e:  # name the record and reward so bad data is findable
          raise ValueError(f"reward {name!r} failed on record {record}: {e}") from e
    for i, value in enumerate(values):
      if isinstance(value, (list, tuple)):
        if len(value) != steps[i]:
          raise ValueError(f"reward {name!r} returned {len(value)} per-step values for record "
                           f"{records[i]}, which has {steps[i]} steps")
        for j, v in enumerate(value):
          per_step[i][j] += weight * float(v)
        components[i][name] = float(sum(value))
      else:
        per_step[i][-1] += weight * float(value)
        components[i][name] = float(value)
  return [RewardResult(total=float(sum(p)), per_step=p, components=c)
          for p, c in zip(per_step, components)]
