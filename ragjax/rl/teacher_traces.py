"""SFT traces through the real rollout engine, written by a teacher-forced policy.

Cold-start SFT data must look exactly like what the RL rollouts produce (same prompt, same
observation formatting, same labels), so the engine runs with `ragjax.rollout.teacher.
TeacherPolicy` emitting given text in place of sampling; the traces are training data.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ragjax.rl.step_samples import step_samples
from ragjax.rollout.engine import RolloutEngine
from ragjax.rollout.teacher import TeacherPolicy


def teacher_traces(engine, prompts: Sequence, scripts: Sequence[Sequence[str]], *,
                   max_new_tokens: int, cache_length: int, chunk: int = 500, seed: int = 0,
                   steps: bool = False, on_batch=None, retriever=None
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Forced traces run through the real engine: (tokens, labels) per prompt, unpadded; with
  `steps`, per step sample instead (`step_samples`: each turn with the context
  it was generated from, R3-RAG's SFT samples).

  `engine` supplies the protocol, retriever, tokenizer, eos ids and loop settings; each chunk of
  `chunk` prompts runs with a `TeacherPolicy` emitting `scripts[i]` in place of its policy, so
  observations are real retrieval results and labels match RL rollouts exactly.
  `on_batch(batch, offset)` sees each chunk's `RolloutBatch` (offset = its first prompt);
  `retriever` replaces the engine's (e.g. a wrapper that rewrites the passages)."""
  if len(prompts) != len(scripts):
    raise ValueError(f"{len(prompts)} prompts but {len(scripts)} scripts")
  rows_t, rows_l = [], []
  for s in range(0, len(prompts), chunk):
    teacher = TeacherPolicy(engine.tokenizer, scripts[s:s + chunk],
                            stop_strings=engine.protocol.stop_sequences,
                            eos_ids=engine.eos_ids,
                            max_new_tokens=max_new_tokens, cache_length=cache_length)
    forced = RolloutEngine(engine.protocol, teacher, retriever or engine.retriever,
                           engine.tokenizer, engine.config)
    batch = forced.run(list(prompts[s:s + chunk]), samples_per_prompt=1, seed=seed)
    if on_batch is not None:
      on_batch(batch, s)
    t = step_samples(batch).traj if steps else batch.traj
    tokens, labels = np.asarray(t.tokens), np.asarray(t.labels)
    for i in range(t.num_rows):
      n = int(t.lengths[i])
      rows_t.append(tokens[i, :n])
      rows_l.append(labels[i, :n])
  return rows_t, rows_l
