"""A rollout wave: its state, its prefill, and refill (continuous batching at group granularity).

A wave prefills its first `held` prompts' groups (plus spare rows for hooks that clone, set done
and kept free) and queues the rest; when every row of a group has stopped, `Wave.refill` gives
the freed sampler rows to the next queued prompts' groups (one forward over the new prompts,
written into the freed rows with the keys and temperatures one big prefill would give them:
`Policy.refill`).  Row b of the whole batch samples with key fold_in(PRNGKey(seed), b) whatever
its wave or sampler row, or, with `key_ids`, fold_in(PRNGKey(seed), key_ids[p] + g) for sample
g of prompt p, so waves change memory and speed, not trajectories.
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Optional, Sequence

from ragjax.rollout.row_store import Row, RowStore
from ragjax.rollout.sizing import spare_prompts


@dataclasses.dataclass
class Wave:
  """One wave's state: its prompts as given to the run (`records`), as `PromptInput`s and as
  ids, their group ids, the group size, the run's seed, the batch index of its first row,
  the prompts' key ids (None: batch positions), the prompts still queued for freed rows, and
  its rows with the sampler state (`rows`)."""
  records: list
  inputs: list
  uids: list
  prompt_ids: list
  group_size: int
  seed: int
  first_row: int
  key_ids: Optional[list]
  rows: RowStore
  queue: list

  def add_group(self, p: int, sampler_rows) -> None:
    """Rows of prompt p's G samples (batch rows p * G + g), decoding in `sampler_rows`."""
    g = self.group_size
    for j, sampler_row in enumerate(sampler_rows):
      self.rows.add(p * g + j, Row.for_prompt(
          self.prompt_ids[p], sampler_row, group_id=self.uids[p], prompt_index=p, sample_index=j))

  def row_ids(self, prompts) -> list[int]:
    """The sampling key index of each row of `prompts` (wave positions): key_ids[p] + sample."""
    return row_ids(self.key_ids, prompts, self.group_size)

  def refill(self) -> list[int]:
    """Rows that finished give their sampler rows to the next queued prompts, whole groups;
    the new batch rows (none when nothing is queued or no group's rows are free)."""
    if not self.queue:
      return []
    rows, g = self.rows, self.group_size
    rows.release_done()
    k = min(len(rows.free) // g, len(self.queue))
    if not k:
      return []
    rows.free.sort()
    prompts, self.queue = self.queue[:k], self.queue[k:]
    sampler_rows, rows.free = rows.free[:k * g], rows.free[k * g:]
    keyed = {} if self.key_ids is None else {"row_ids": self.row_ids(prompts)}
    rows.refill(sampler_rows, [self.prompt_ids[p] for p in prompts], samples_per_prompt=g,
                seed=self.seed, first_row=self.first_row + prompts[0] * g, **keyed)
    for i, p in enumerate(prompts):
      self.add_group(p, sampler_rows[i * g:(i + 1) * g])
    rows.stats["refilled_groups"] += k
    return [p * g + j for p in prompts for j in range(g)]


def row_ids(key_ids: Sequence[int], prompts, g: int) -> list[int]:
  return [int(key_ids[p]) + j for p in prompts for j in range(g)]


def fit_prompt(ids: list, inp, limit: Optional[int], stats: collections.Counter) -> list:
  """A prompt longer than the policy takes (`max_prompt_len`) loses its middle: the head
  (instructions) and the tail (the question's end, the generation prompt) stay, as
  long-context evaluations cut, and the cut is counted in the step's stats
  (`prompts_truncated`), so one over-long question never aborts a batch."""
  if not limit or len(ids) <= limit:
    return ids
  stats["prompts_truncated"] += 1
  warnings.warn(f"prompt of {len(ids)} tokens is longer than the policy's {limit}: its middle "
                f"is cut ({str(getattr(inp, 'question', ''))[:60]!r})", stacklevel=4)
  head = limit // 2
  return list(ids[:head]) + list(ids[len(ids) - (limit - head):])


def start_wave(sampler, records, inputs, uids, prompt_ids, group_size: int, seed, first_row: int,
               spare: int, held: int, key_ids: Optional[list], make_rows) -> Wave:
  """Prefills the first `held` prompts' groups and the spare rows (copies of the first prompt,
  set done and free); the other prompts are queued.  `make_rows(state, free)` is the wave's
  `RowStore`."""
  g = group_size
  extra = spare_prompts(held, g, spare, getattr(sampler, "row_multiple", 1))
  keyed = {} if key_ids is None else {
      "row_ids": row_ids(key_ids, list(range(held)) + [0] * extra, g)}
  state = sampler.prefill(list(prompt_ids[:held]) + [prompt_ids[0]] * extra,
                          samples_per_prompt=g, seed=seed, first_row=first_row, **keyed)
  free = list(range(held * g, (held + extra) * g))
  if free:
    state = sampler.set_done(state, free)
  wave = Wave(records=list(records), inputs=list(inputs), uids=list(uids),
              prompt_ids=list(prompt_ids), group_size=g, seed=int(seed), first_row=first_row,
              key_ids=key_ids, rows=make_rows(state, free), queue=list(range(held, len(inputs))))
  for p in range(held):
    wave.add_group(p, range(p * g, (p + 1) * g))
  return wave
