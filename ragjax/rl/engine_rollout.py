"""The trainer's `rollout_fn` backed by the real multi-turn engine and sampler.

`Trainer` expands each prompt to `group_size` consecutive records and calls
`rollout_fn(params, prompts, rng)`; the engine wants unique prompts and shares one prefill
between the G samples of a prompt.  This adapter bridges the two, syncs the sampler's weights,
pads trajectories to a fixed width (so the jitted update compiles once) and exposes the fields
the trainer reads: tokens, labels, sampler_logprobs, group_id, response_text, metadata, timings.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np

from ragjax.rollout.engine import RolloutEngine
from ragjax.rollout.labels import Source
from ragjax.rollout.trajectory import RolloutBatch


@dataclasses.dataclass
class Trajectories:
  tokens: np.ndarray
  labels: np.ndarray
  sampler_logprobs: np.ndarray
  group_id: np.ndarray
  response_text: list[str]
  metadata: list[dict]
  timings: dict
  batch: RolloutBatch          # the engine's own output (viewer, row metadata)


def pick_width(n: int, widths: Sequence[int]) -> int:
  """The smallest allowed width holding n tokens: a few shapes, so few compiles."""
  for w in sorted(widths):
    if n <= w:
      return w
  raise ValueError(f"trajectory of {n} tokens exceeds the largest width {max(widths)}; "
                   f"raise the widths or lower the rollout budgets")


def pad_to_width(x: np.ndarray, width: int, value=0) -> np.ndarray:
  if x.shape[1] > width:
    raise ValueError(f"trajectory of {x.shape[1]} tokens exceeds the width {width}")
  out = np.full((x.shape[0], width) + x.shape[2:], value, x.dtype)
  out[:, :x.shape[1]] = x
  return out


def row_metadata(batch: RolloutBatch) -> list[dict]:
  """What rewards and metrics read per row: queries, retrieved ids, answer, stop reason."""
  return [{"queries": r.queries, "doc_ids": [list(d) for d in r.doc_ids],
           "num_searches": r.num_searches, "answer": r.answer, "stop_reason": r.stop_reason,
           "turns": len(r.turns)} for r in batch.meta.rows]


class CountingRetriever:
  """Wraps a retriever to time its calls (rollout time vs retrieval time)."""

  def __init__(self, inner):
    self.inner, self.seconds, self.calls = inner, 0.0, 0

  def search(self, queries, k):
    t0 = time.perf_counter()
    try:
      return self.inner.search(queries, k)
    finally:
      self.seconds += time.perf_counter() - t0
      self.calls += 1


class EngineRollout:
  """`rollout_fn(params, prompts, rng)` over a `RolloutEngine` whose policy is a `Sampler`."""

  def __init__(self, engine: RolloutEngine, group_size: int, widths: Sequence[int]):
    self.engine, self.group_size, self.widths = engine, group_size, tuple(widths)
    self.engine.retriever = CountingRetriever(engine.retriever)

  def __call__(self, params, prompts: Sequence[dict], rng, group_size: Optional[int] = None
               ) -> Trajectories:
    g = group_size or self.group_size
    if len(prompts) % g:
      raise ValueError(f"{len(prompts)} prompt records are not whole groups of {g}")
    unique = list(prompts[::g])
    for i, p in enumerate(unique):
      if any(q.get("uid") != p.get("uid") for q in prompts[i * g:(i + 1) * g]):
        raise ValueError(f"prompt records {i * g}..{(i + 1) * g - 1} are not one group")
    uids = [int(p.get("uid", i)) if str(p.get("uid", i)).lstrip("-").isdigit() else i
            for i, p in enumerate(unique)]
    self.engine.policy.set_params(params)
    seed = int(jax.random.randint(rng, (), 0, 2**31 - 1))
    retr = self.engine.retriever
    t_ret0 = retr.seconds
    t0 = time.perf_counter()
    batch = self.engine.run(unique, samples_per_prompt=g, seed=seed, uids=uids)
    rollout_s = time.perf_counter() - t0
    t = batch.traj
    pad = int(Source.PAD)
    width = pick_width(np.asarray(t.tokens).shape[1], self.widths)
    return Trajectories(
        tokens=pad_to_width(np.asarray(t.tokens), width),
        labels=pad_to_width(np.asarray(t.labels), width, pad),
        sampler_logprobs=pad_to_width(np.asarray(t.sampler_logprobs, np.float32), width),
        group_id=np.asarray(t.group_id),
        response_text=batch.meta.response_texts,
        metadata=row_metadata(batch),
        timings={"rollout_s": rollout_s, "retrieval_s": retr.seconds - t_ret0},
        batch=batch)


def as_record(example: Any, index: int) -> dict:
  """A dataset example (ragjax.data.schema.Example or dict) as the trainer's record."""
  d = example.to_record() if hasattr(example, "to_record") else dict(example)
  d.setdefault("uid", index)
  return d
