"""How many sampler rows a rollout holds: its waves and the spare rows of hooks that clone.

A run's prompts go in waves of at most `EngineConfig.wave_rows` sampler rows, whole groups at a
time (`plan_waves`); with refill there is one wave whose first prompts are held and the rest
queued.  Hooks that clone rows (REX-RAG) get spare rows, shared among the waves in proportion
to their prompts or sized per wave by the hooks (`wave_spare_rows`), prefilled as whole groups
(`spare_prompts`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


def spare_prompts(prompts: int, group_size: int, spare: int, row_multiple: int = 1) -> int:
  """Copies of the first prompt the engine prefills to hold `spare` spare rows: ceil(spare / G),
  plus as few more as keep all sampler rows ((prompts + copies) x G) a multiple of
  `row_multiple` (the mesh's batch devices, so the sampler's rows stay sharded)."""
  if spare <= 0:
    return 0
  extra = -(-spare // group_size)
  while ((prompts + extra) * group_size) % max(row_multiple, 1):
    extra += 1
  return extra


def spare_rows_for(spare_rows: int, hooks: Sequence, rows: int) -> int:
  """`spare_rows` when >= 0; for -1, what the hooks ask for a run of `rows` rows (the sum of
  `hook.spare_rows(rows)` over hooks that define it).  The engine reserves this many rounded
  up to whole groups."""
  if spare_rows >= 0:
    return spare_rows
  if spare_rows != -1:
    raise ValueError(f"spare_rows must be >= 0 or -1 (sized by the hooks), got {spare_rows}")
  return sum(int(h.spare_rows(rows)) for h in hooks if hasattr(h, "spare_rows"))


@dataclasses.dataclass(frozen=True)
class WavePlan:
  """A wave: prompts [start, stop) of the run, the first `held` of them prefilled at once (the
  rest queued for rows that free up: refill)."""
  start: int
  stop: int
  held: int


def plan_waves(prompts: int, group_size: int, wave_rows: int, refill: bool) -> list[WavePlan]:
  """The run's waves: one (the whole batch) without `wave_rows`; with it, waves of
  `wave_rows // G` prompts one after the other, or, when `refill`, one wave that holds that
  many prompts at a time."""
  per_wave = max(1, wave_rows // group_size) if wave_rows else prompts
  refill = refill and per_wave < prompts
  step = prompts if refill else per_wave
  return [WavePlan(start, prompts if refill else min(start + per_wave, prompts),
                   min(per_wave, prompts - start)) for start in range(0, prompts, step)]


def wave_spare_rows(spare_rows: int, hooks: Sequence, held: int, group_size: int,
                    prompts: int) -> int:
  """A wave's spare rows: sized by the hooks for its `held` prompts' rows (spare_rows=-1), or
  its share of `spare_rows` (in proportion to its prompts, rounded up)."""
  if spare_rows == -1:
    return spare_rows_for(spare_rows, hooks, held * group_size)
  return -(-spare_rows * held // prompts) if spare_rows else 0
