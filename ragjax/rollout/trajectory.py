"""The Trajectory batch: a pytree of [rows, T] arrays plus host metadata kept beside it.

Arrays (what `ragjax.rl` consumes; names are the contract):
  tokens [R,T] int32, labels [R,T] int8 (`Source`), loss_mask [R,T] float32,
  sampler_logprobs [R,T] float32 (0 off policy tokens), group_id [R] int32 (the prompt uid;
  REX-RAG clones share their source's), turn [R,T] int32 (-1 on prompt and padding),
  lengths [R], prompt_lengths [R] int32.
Rows are right-padded: [prompt | response | PAD].

The metadata (queries, doc ids, answers, stop reasons, texts) is host-only and lives in
`TrajectoryMeta`, outside the pytree, so jitted train steps never retrace on strings.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import flax.struct
import jax.numpy as jnp
import numpy as np

from ragjax.rollout.labels import LABEL_DTYPE, MaskConfig, Source, loss_mask_from_labels


@flax.struct.dataclass
class Trajectory:
  tokens: jnp.ndarray
  labels: jnp.ndarray
  loss_mask: jnp.ndarray
  sampler_logprobs: jnp.ndarray
  group_id: jnp.ndarray
  turn: jnp.ndarray
  lengths: jnp.ndarray
  prompt_lengths: jnp.ndarray

  @property
  def num_rows(self) -> int:
    return int(self.tokens.shape[0])

  def attention_mask(self):
    return self.labels != Source.PAD

  def select(self, rows: Sequence[int]) -> "Trajectory":
    idx = np.asarray(rows, np.int64)
    return Trajectory(**{f.name: np.asarray(getattr(self, f.name))[idx]
                         for f in dataclasses.fields(self)})


@dataclasses.dataclass
class TurnRecord:
  """One generation turn of one row."""
  turn: int
  action: str                       # search | answer | invalid | end | continue
  text: str                         # the kept policy text of the turn
  query: Optional[str] = None
  all_queries: tuple[str, ...] = ()
  doc_ids: tuple[str, ...] = ()
  obs_truncated: bool = False
  reason: str = ""


@dataclasses.dataclass
class RowMeta:
  row: int                          # index in the Trajectory
  group_id: int
  prompt_index: int
  sample_index: int
  clone_of: Optional[int] = None    # Trajectory row this one was cloned from
  sampler_row: int = -1             # the sampler row it ran in
  cloned_at_turn: Optional[int] = None  # turns before this one are the source's history
  answer: Optional[str] = None
  stop_reason: str = ""
  response_text: str = ""
  turns: list[TurnRecord] = dataclasses.field(default_factory=list)

  @property
  def queries(self) -> list[str]:
    return [t.query for t in self.turns if t.action == "search"]

  @property
  def doc_ids(self) -> list[tuple[str, ...]]:
    return [t.doc_ids for t in self.turns if t.action == "search"]

  @property
  def num_searches(self) -> int:
    return len(self.queries)


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
class RolloutBatch:
  traj: Trajectory
  meta: TrajectoryMeta


def assemble(rows: Sequence[dict], mask_config: MaskConfig = MaskConfig(),
             pad_to_multiple: int = 1, pad_id: int = 0) -> Trajectory:
  """Pads host rows ({tokens, labels, logprobs, turns, prompt_len, group_id}) into arrays."""
  if not rows:
    raise ValueError("assemble needs at least one row")
  for i, r in enumerate(rows):
    n = len(r["tokens"])
    for key in ("labels", "logprobs", "turns"):
      if len(r[key]) != n:
        raise ValueError(f"row {i}: {key} has {len(r[key])} entries for {n} tokens")
  t = max(len(r["tokens"]) for r in rows)
  t = -(-t // pad_to_multiple) * pad_to_multiple
  n = len(rows)
  tokens = np.full((n, t), pad_id, np.int32)
  labels = np.full((n, t), Source.PAD, LABEL_DTYPE)
  logps = np.zeros((n, t), np.float32)
  turn = np.full((n, t), -1, np.int32)
  for i, r in enumerate(rows):
    k = len(r["tokens"])
    tokens[i, :k] = r["tokens"]
    labels[i, :k] = r["labels"]
    logps[i, :k] = r["logprobs"]
    turn[i, :k] = r["turns"]
  return Trajectory(
      tokens=tokens, labels=labels, loss_mask=loss_mask_from_labels(labels, mask_config),
      sampler_logprobs=logps,
      group_id=np.asarray([r["group_id"] for r in rows], np.int32), turn=turn,
      lengths=np.asarray([len(r["tokens"]) for r in rows], np.int32),
      prompt_lengths=np.asarray([r["prompt_len"] for r in rows], np.int32))
