"""The training questions RL draws from: those a search can teach on, not seen in the cold start.

    pool, stats = question_pool(engine, train, PoolConfig(retrievable=True), exclude=800,
                                max_new_tokens=64, cache_length=1280)

GRPO learns only from groups whose rollouts differ.  A question whose answer no search for it
can find gives a group that is wrong in every rollout; one the cold start was fitted on is
mostly right in every rollout.  So the pool (`pool.*` in a config):
1. with `exclude_cold_start`, drops the training questions the cold start scripted (the qa
   recipe passes `exclude` = `traces.questions`: the first ones, in order);
2. with `retrievable`, keeps those whose search for the question itself (the cold-started
   policy's query) returns passages that hold a gold answer as whole words
   (`ragjax.metrics.answer.cover_word_match`: the gold "no" is not found in "not"), as the
   policy would see them: the engine's retriever, top-k and passage cut, through the real
   rollout loop with a scripted search (`ragjax.rl.teacher_traces`);
3. with `pass_k` > 0, samples each remaining question `pass_k` times with the training
   sampler and keeps those solved sometimes (0 < pass@k share < 1): DAPO's dynamic sampling
   done once, before training (costs pass_k rollouts per question);
4. keeps at most `max_questions` (0: all), in the split's order.
The pool only ever narrows the training split, which `ragjax.data.splits` keeps disjoint
from dev and test.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from ragjax.metrics import answer_metrics
from ragjax.metrics.answer import cover_word_match
from ragjax.rl.search_traces import retrieved_blocks, search_script
from ragjax.rl.teacher_traces import teacher_traces


@dataclasses.dataclass(frozen=True)
class PoolConfig:
  """`pool.*`: which training questions RL draws from (module docstring)."""
  retrievable: bool = False
  exclude_cold_start: bool = False   # leave out the questions the cold start was fitted on
  pass_k: int = 0               # > 0: keep questions the start policy solves in 0 < x < k samples
  max_questions: int = 0        # 0: every question left

  def __post_init__(self):
    for name in ("pass_k", "max_questions"):
      if getattr(self, name) < 0:
        raise ValueError(f"pool.{name} must be >= 0, got {getattr(self, name)}")
    if self.pass_k == 1:
      raise ValueError("pool.pass_k=1 keeps no question (one sample is never both right and "
                       "wrong): use 0 (off) or >= 2")


def retrieved_flags(engine, records: Sequence[Mapping], *, max_new_tokens: int,
                    cache_length: int, seed: int = 0, chunk: int = 100) -> list[bool]:
  """Per record: a search for its question (through `engine`'s protocol, retriever and
  passage cut) returns passages holding a gold answer as whole words (in its `<information>`
  or, AutoRefine's, `<documents>` block).  A question whose
  search turn is longer than `max_new_tokens` is False (the policy cannot write it)."""
  flags = [False] * len(records)
  fits = [i for i, r in enumerate(records)
          if len(engine.tokenizer(search_script(r)[0], add_special_tokens=False)["input_ids"])
          <= max_new_tokens]
  subset = [records[i] for i in fits]

  def check(batch, offset):
    for row in batch.rows:
      i = fits[offset + row.prompt_index]
      flags[i] = any(cover_word_match(b, records[i]["golden_answers"])
                     for b in retrieved_blocks(row.response_text))

  if subset:
    teacher_traces(engine, subset, [search_script(r) for r in subset],
                   max_new_tokens=max_new_tokens, cache_length=cache_length, chunk=chunk,
                   seed=seed, on_batch=check)
  return flags


def solve_rates(engine, records: Sequence[Mapping], k: int, *, seed: int = 0,
                chunk: int = 16) -> list[float]:
  """Per record: the share of `k` sampled rollouts (the engine's sampler) whose answer is
  right (EM)."""
  rates = []
  for s in range(0, len(records), chunk):
    part = list(records[s:s + chunk])
    batch = engine.run(part, samples_per_prompt=k, seed=seed + s)
    right = np.zeros(len(part))
    for row in batch.rows:
      right[row.prompt_index] += answer_metrics(
          row.answer, part[row.prompt_index]["golden_answers"])["em"]
    rates.extend((right / k).tolist())
  return rates


def question_pool(engine, train: Sequence[Mapping], pool: PoolConfig, *, max_new_tokens: int,
                  cache_length: int, exclude: int = 0, seed: int = 0, sampler_engine=None
                  ) -> tuple[list[Mapping], dict]:
  """(the pool's records, counts): the module docstring's steps 1-4.  `exclude`: how many
  leading training questions the cold start saw; `engine` runs the scripted searches (greedy,
  no hooks); `sampler_engine` the pass@k samples (needed when `pool.pass_k` > 0)."""
  records = list(train[exclude if pool.exclude_cold_start else 0:])
  stats = {"training_questions": len(train), "excluded": len(train) - len(records)}
  if pool.retrievable:       # checked in chunks, stopping once `max_questions` are found
    kept, checked, step = [], 0, max(4 * pool.max_questions, 100) if pool.max_questions else None
    while checked < len(records) and not (pool.max_questions and not pool.pass_k
                                          and len(kept) >= pool.max_questions):
      part = records[checked:checked + step] if step else records
      flags = retrieved_flags(engine, part, max_new_tokens=max_new_tokens,
                              cache_length=cache_length, seed=seed)
      kept += [r for r, ok in zip(part, flags) if ok]
      checked += len(part)
    stats["checked"], stats["retrievable"] = checked, len(kept)
    records = kept
  if pool.pass_k:
    if sampler_engine is None:
      raise ValueError("pool.pass_k needs a sampling engine")
    rates = solve_rates(sampler_engine, records, pool.pass_k, seed=seed)
    stats["never_solved"] = sum(r == 0 for r in rates)
    stats["always_solved"] = sum(r == 1 for r in rates)
    records = [r for r, x in zip(records, rates) if 0 < x < 1]
  if pool.max_questions:
    records = records[:pool.max_questions]
  stats["pool"] = len(records)
  return records, stats


def pool_config(section: Optional[Mapping]) -> PoolConfig:
  """`PoolConfig` from a config's `pool` section (absent: no filtering)."""
  from ragjax.typed_config import from_dict
  return PoolConfig() if section is None else from_dict(PoolConfig, section, "pool")
