"""Rollouts split over JAX processes (multi-host): each rolls out its share, all hold the batch.

    engine = ProcessShardedEngine(make_engine(...))      # the sampler on this process's devices
    batch = engine.run(prompts, samples_per_prompt=G, seed=s, uids=u)

Each process takes a contiguous share of the prompts (so a group never splits), rolls it out
with its own process-local sampler, queries its own (or a shared) retriever, and the row
records are then gathered so every process holds the whole batch, in prompt order, exactly as
one process would have produced it: a row's sampling key depends on its place in the whole
batch (`first_row`), not on the process that ran it.  `set_params` hands the sampler the full
value of the (sharded, global) training params.  On one process it is the engine unchanged.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

import jax

from ragjax.parallel.distributed import allgather_objects, shard_range, to_host
from ragjax.rollout.trajectory import RolloutBatch, TrajectoryMeta, assemble, assemble_samples


class GatheringPolicy:
  """The engine's sampler, fed the full value of global params (process-local decoding)."""

  def __init__(self, sampler):
    self.sampler = sampler

  def set_params(self, params) -> None:
    self.sampler.set_params(jax.tree.map(to_host, params))

  def __getattr__(self, name):
    return getattr(self.sampler, name)


class ProcessShardedEngine:
  def __init__(self, engine):
    self.engine = engine
    self.sampler = GatheringPolicy(engine.sampler)

  def __getattr__(self, name):
    return getattr(self.engine, name)

  def set_params(self, params) -> None:
    self.sampler.set_params(params)

  def run(self, prompts: Sequence, samples_per_prompt: int = 1, seed: int = 0,
          uids: Optional[Sequence[int]] = None) -> RolloutBatch:
    t0 = time.perf_counter()
    prompts = list(prompts)
    uids = list(range(len(prompts))) if uids is None else list(uids)
    start, end = shard_range(len(prompts))
    mine = (self.engine.run_rows(prompts[start:end], samples_per_prompt, seed, uids[start:end],
                                 first_row=start * samples_per_prompt)
            if end > start else ([], [], {}, []))
    parts = allgather_objects((start, *mine))
    dicts, metas, timings, stats = [], [], {"retrieval_s": 0.0, "retrieval_wait_s": 0.0,
                                                "retrieval_calls": 0}, {}
    samples = []
    for first_prompt, d, m, t, s in parts:
      for k, v in t.get("stats", {}).items():      # hook counters add up over processes
        stats[k] = stats.get(k, 0) + v
      offset = len(dicts)
      for meta in m:
        metas.append(dataclasses.replace(
            meta, row=meta.row + offset, prompt_index=meta.prompt_index + first_prompt,
            clone_of=None if meta.clone_of is None else meta.clone_of + offset))
      samples += [(row + offset, sample) for row, sample in s]
      dicts += d
      for k in timings:
        timings[k] = max(timings[k], t.get(k, 0)) if k.endswith("_s") else timings[k] + t.get(k, 0)
    traj = assemble(dicts, self.engine.config.widths, self.engine.config.pad_id)
    timings["rollout_s"] = time.perf_counter() - t0
    return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=metas,
                                                       protocol=self.engine.protocol.name),
                        timings=timings, stats=stats,
                        samples=assemble_samples(samples, self.engine.config.widths,
                                                 self.engine.config.pad_id))
