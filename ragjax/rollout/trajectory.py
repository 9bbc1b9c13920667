"""The rollout batch: [rows, T] arrays plus one metadata record per row.

This is the one type that crosses from rollout to training.  Arrays (`Trajectory`):
  tokens [R,T] int32, labels [R,T] int8 (`Source`), sampler_logprobs [R,T] float32 (0 off
  policy tokens), group_id [R] int32 (the prompt's uid; REX-RAG clones share their source's),
  turn [R,T] int32 (-1 on prompt and padding), lengths [R], prompt_lengths [R] int32.
Rows are right-padded to a width bucket: [prompt | response | PAD].  The loss mask is not
stored: it is `ragjax.rl.masks.loss_mask(labels, train_on)`, a function of the config that
training computes.

The metadata record (`RowMeta`: parsed answer, queries, retrieved ids and texts, per-turn token
spans = step boundaries, stop reason, protocol fields such as refine text or fallback counts)
is host-only and lives beside the arrays, so jitted steps never retrace on strings.  Rewards,
metrics and step rewards read only this record (plus the dataset example and training step).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import flax.struct
import jax.numpy as jnp
import numpy as np

from ragjax.rollout.labels import LABEL_DTYPE, Source
from ragjax.parallel.buckets import pick_bucket


@flax.struct.dataclass
class Trajectory:
  tokens: jnp.ndarray
  labels: jnp.ndarray
  sampler_logprobs: jnp.ndarray
  group_id: jnp.ndarray
  turn: jnp.ndarray
  lengths: jnp.ndarray
  prompt_lengths: jnp.ndarray

  @property
  def num_rows(self) -> int:
    return int(self.tokens.shape[0])

  def select(self, rows: Sequence[int]) -> "Trajectory":
    idx = np.asarray(rows, np.int64)
    return Trajectory(**{f.name: np.asarray(getattr(self, f.name))[idx]
                         for f in dataclasses.fields(self)})


@dataclasses.dataclass
class TurnRecord:
  """One generation turn of one row.  [start, end) are the token indices (in the row) of the
  policy tokens this turn kept: `end` is the step boundary that step rewards land on.  With a
  restart-context protocol the indices are in the turn's own step sample
  (`RolloutBatch.samples`)."""
  turn: int
  action: str                       # search | answer | invalid | end | continue
  text: str                         # the kept policy text of the turn
  start: int = 0
  end: int = 0
  query: Optional[str] = None
  all_queries: tuple[str, ...] = ()
  doc_ids: tuple[str, ...] = ()
  doc_texts: tuple[str, ...] = ()   # contents of the retrieved documents shown after this turn
  obs_truncated: bool = False
  reason: str = ""


@dataclasses.dataclass
class RowMeta:
  """The per-row metadata record every reward and metric reads."""
  row: int                          # index in the Trajectory
  group_id: int
  prompt_index: int                 # index of the prompt (dataset example) in the run() call
  sample_index: int
  clone_of: Optional[int] = None    # Trajectory row this one was cloned from (-1: not in batch)
  sampler_row: int = -1             # the sampler row it ran in
  cloned_at_turn: Optional[int] = None  # turns before this one are the source's history
  answer: Optional[str] = None      # the protocol's parse of the final answer (None: no answer)
  stop_reason: str = ""
  response_text: str = ""           # everything after the prompt (policy text + observations)
  turns: list[TurnRecord] = dataclasses.field(default_factory=list)
  extra: dict = dataclasses.field(default_factory=dict)   # protocol fields (Protocol.annotate)

  @property
  def queries(self) -> list[str]:
    return [t.query for t in self.turns if t.action == "search"]

  @property
  def doc_ids(self) -> list[tuple[str, ...]]:
    return [t.doc_ids for t in self.turns if t.action == "search"]

  @property
  def doc_texts(self) -> list[tuple[str, ...]]:
    return [t.doc_texts for t in self.turns if t.action == "search"]

  @property
  def num_searches(self) -> int:
    return len(self.queries)

  @property
  def policy_text(self) -> str:
    """The policy's own text, turns concatenated (no observations)."""
    return "".join(t.text for t in self.turns)

  @property
  def step_ends(self) -> list[int]:
    """Token index of each turn's last policy token (its step boundary); -1 for a turn that
    kept no token."""
    return [t.end - 1 if t.end > t.start else -1 for t in self.turns]

  @property
  def num_turns(self) -> int:
    return len(self.turns)


@dataclasses.dataclass
class TrajectoryMeta:
  rows: list[RowMeta]
  protocol: str = ""

  def __len__(self):
    return len(self.rows)

  @property
  def answers(self) -> list[Optional[str]]:
    return [r.answer for r in self.rows]

  @property
  def stop_reasons(self) -> list[str]:
    return [r.stop_reason for r in self.rows]

  @property
  def queries(self) -> list[list[str]]:
    return [r.queries for r in self.rows]

  @property
  def doc_ids(self) -> list[list[tuple[str, ...]]]:
    return [r.doc_ids for r in self.rows]

  @property
  def response_texts(self) -> list[str]:
    return [r.response_text for r in self.rows]


@dataclasses.dataclass
class StepSamples:
  """One training sample per policy turn: [S, T] arrays whose sample holds the context the turn
  was generated from (trained on nothing) and the turn's own tokens (POLICY), with the
  trajectory row (`row`, -1 for padding) and turn index (`turn`) it comes from.  A
  restart-context engine records them as it runs; `ragjax.rl.step_samples` derives them
  from stream trajectories (each turn's prefix) and pads them."""
  traj: Trajectory
  row: np.ndarray                   # [S] int32
  turn: np.ndarray                  # [S] int32

  @property
  def num_samples(self) -> int:
    return self.traj.num_rows


@dataclasses.dataclass
class RolloutBatch:
  """What the engine returns and the trainer consumes: arrays, row records, timings
  (`rollout_s`, `retrieval_s`, `retrieval_calls`), the counters hooks noted (`stats`, e.g.
  clones a hook could not make for want of spare rows) and the step samples a restart-context
  protocol produced (`samples`; None: the rows are the only token sequences)."""
  traj: Trajectory
  meta: TrajectoryMeta
  timings: dict = dataclasses.field(default_factory=dict)
  stats: dict = dataclasses.field(default_factory=dict)
  samples: Optional[StepSamples] = None

  @property
  def rows(self) -> list[RowMeta]:
    return self.meta.rows

  def select(self, rows: Sequence[int]) -> "RolloutBatch":
    """The batch of `rows` (in that order), records renumbered: `row` is the new index and
    `clone_of` points at the source's new index, or is -1 when the source was not selected
    (a clone stays a clone).  Timings and stats are the whole rollout's."""
    rows = [int(r) for r in rows]
    n = self.traj.num_rows
    bad = [r for r in rows if not 0 <= r < n]
    if bad or len(set(rows)) != len(rows):
      raise ValueError(f"select: rows must be distinct indices in [0, {n}), got {rows}")
    new_index = {r: i for i, r in enumerate(rows)}
    metas = []
    for i, r in enumerate(rows):
      src = self.meta.rows[r]
      clone_of = None if src.clone_of is None else new_index.get(src.clone_of, -1)
      metas.append(dataclasses.replace(src, row=i, clone_of=clone_of))
    return RolloutBatch(traj=self.traj.select(rows),
                        meta=TrajectoryMeta(rows=metas, protocol=self.meta.protocol),
                        timings=dict(self.timings), stats=dict(self.stats))


def concat(batches: Sequence[RolloutBatch], prompt_counts: Sequence[int]) -> RolloutBatch:
  """The rows of several rollouts of one step as one batch, in order: arrays padded to the
  widest, records renumbered (`row`, `clone_of`), and each batch's `prompt_index` shifted by
  the prompts of the batches before it (`prompt_counts[i]`: the prompts batch i was run on).
  Timings and counters are summed.  (Dynamic sampling's extra generations,
  `ragjax.rl.dynamic_sampling`.)"""
  if len(batches) != len(prompt_counts) or not batches:
    raise ValueError("concat: one prompt count per batch, at least one batch")
  if any(b.samples is not None for b in batches):
    raise ValueError("concat: rollouts with step samples (protocol.context='restart') cannot "
                     "be joined")
  width = max(int(b.traj.tokens.shape[1]) for b in batches)
  pad = lambda x, fill: np.pad(np.asarray(x), ((0, 0), (0, width - np.shape(x)[1])),
                               constant_values=fill)
  fills = {"tokens": 0, "labels": Source.PAD, "sampler_logprobs": 0.0, "turn": -1}
  fields = {}
  for f in dataclasses.fields(Trajectory):
    parts = [getattr(b.traj, f.name) for b in batches]
    if f.name in fills:
      parts = [pad(x, fills[f.name]) for x in parts]
    fields[f.name] = np.concatenate([np.asarray(x) for x in parts])
  metas, row0, prompt0 = [], 0, 0
  for b, n_prompts in zip(batches, prompt_counts):
    for m in b.meta.rows:
      metas.append(dataclasses.replace(
          m, row=m.row + row0, prompt_index=m.prompt_index + prompt0,
          clone_of=None if m.clone_of is None else (m.clone_of + row0 if m.clone_of >= 0
                                                    else -1)))
    row0 += b.traj.num_rows
    prompt0 += int(n_prompts)
  add = lambda dicts: {k: sum(d.get(k, 0) for d in dicts)
                       for k in dict.fromkeys(k for d in dicts for k in d)}
  return RolloutBatch(traj=Trajectory(**fields),
                      meta=TrajectoryMeta(rows=metas, protocol=batches[0].meta.protocol),
                      timings=add([b.timings for b in batches]),
                      stats=add([b.stats for b in batches]))


def pad_rows(rows: Sequence[Sequence[Any]], width: int, fill, dtype) -> np.ndarray:
  """[len(rows), width] array of right-padded rows; a row longer than `width` is an error."""
  out = np.full((len(rows), width), fill, dtype)
  for i, r in enumerate(rows):
    if len(r) > width:
      raise ValueError(f"row {i} has {len(r)} tokens, more than the width {width}")
    out[i, :len(r)] = r
  return out


def assemble(rows: Sequence[dict], widths: Optional[Sequence[int]] = None,
             pad_id: int = 0) -> Trajectory:
  """Pads host rows ({tokens, labels, logprobs, turns, prompt_len, group_id}) into arrays whose
  width is the smallest of `widths` holding the longest row (None: a multiple of 8), so a
  jitted consumer sees a few shapes only."""
  if not rows:
    raise ValueError("assemble needs at least one row")
  for i, r in enumerate(rows):
    n = len(r["tokens"])
    for key in ("labels", "logprobs", "turns"):
      if len(r[key]) != n:
        raise ValueError(f"row {i}: {key} has {len(r[key])} entries for {n} tokens")
  longest = max(len(r["tokens"]) for r in rows)
  width = (-(-longest // 8) * 8 if widths is None
           else pick_bucket(tuple(widths), longest, "the longest trajectory"))
  return Trajectory(
      tokens=pad_rows([r["tokens"] for r in rows], width, pad_id, np.int32),
      labels=pad_rows([r["labels"] for r in rows], width, Source.PAD, LABEL_DTYPE),
      sampler_logprobs=pad_rows([r["logprobs"] for r in rows], width, 0.0, np.float32),
      group_id=np.asarray([r["group_id"] for r in rows], np.int32),
      turn=pad_rows([r["turns"] for r in rows], width, -1, np.int32),
      lengths=np.asarray([len(r["tokens"]) for r in rows], np.int32),
      prompt_lengths=np.asarray([r["prompt_len"] for r in rows], np.int32))


def assemble_samples(samples: Sequence[tuple[int, dict]], widths: Optional[Sequence[int]] = None,
                     pad_id: int = 0) -> Optional[StepSamples]:
  """(trajectory row, host sample dict) pairs -> `StepSamples` (None when there are none: the
  protocol does not restart its context)."""
  if not samples:
    return None
  dicts = [d for _, d in samples]
  return StepSamples(traj=assemble(dicts, widths, pad_id),
                     row=np.asarray([r for r, _ in samples], np.int32),
                     turn=np.asarray([max(d["turns"]) for d in dicts], np.int32))
