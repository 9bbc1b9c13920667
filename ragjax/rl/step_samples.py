"""Step samples: one (context, turn) training sample per policy turn, as R3-RAG trains.

R3-RAG makes every step its own PPO sample: input = the question, the earlier steps and their
documents; output = the step.  The step's reward sits on its last token and GAE runs over that
step's tokens only, so no value bootstraps across steps.  A restart-context protocol records
these samples while it runs (`RolloutBatch.samples`, the prompts the policy really saw); for a
stream trajectory the sample of turn j is the row's prefix up to the end of that turn, with
every earlier trained token relabelled as prompt (the same tokens the policy saw, in one
sequence).  `step_samples` returns either, padded to a multiple of rows with copies that train
on nothing, so the update keeps a fixed shape however many turns the rollouts took.

The trainer uses them when `rl.step_samples` is set: rewards are still computed once per
trajectory (a per-step list, `ragjax.rl.rewards`), then each sample takes its turn's value
(`sample_rewards`), placed on its tokens like any row's (`ragjax.rl.token_rewards`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ragjax.rollout.labels import Source
from ragjax.rollout.trajectory import RolloutBatch, StepSamples, Trajectory

_WRITTEN = (int(Source.POLICY), int(Source.INJECTED))


def as_context(labels: np.ndarray) -> np.ndarray:
  """Labels with the policy's (and injected) tokens relabelled PROMPT: text the sample reads
  but does not learn (documents stay RETRIEVED; step samples train on policy tokens only)."""
  out = np.array(labels, copy=True)
  out[np.isin(out, _WRITTEN)] = int(Source.PROMPT)
  return out


def prefix_samples(batch: RolloutBatch) -> StepSamples:
  """The step samples of stream trajectories: for each turn that kept tokens, the row's prefix
  up to the turn's end, only that turn's tokens trained."""
  t = batch.traj
  tokens, labels = np.asarray(t.tokens), np.asarray(t.labels)
  logprobs, turn_ids = np.asarray(t.sampler_logprobs), np.asarray(t.turn)
  out = {k: [] for k in ("tokens", "labels", "logprobs", "turn", "lengths", "prompt_lengths",
                         "group_id", "row", "turn_index")}
  for meta in batch.rows:
    i = meta.row
    for j, rec in enumerate(meta.turns):
      if rec.end <= rec.start:
        continue
      lab = as_context(labels[i])
      lab[rec.start:rec.end] = labels[i, rec.start:rec.end]
      lab[rec.end:] = int(Source.PAD)
      inside = np.zeros(lab.shape, bool)
      inside[rec.start:rec.end] = True
      out["tokens"].append(tokens[i])
      out["labels"].append(lab)
      out["logprobs"].append(np.where(inside, logprobs[i], 0.0))
      out["turn"].append(np.where(inside, turn_ids[i], -1))
      out["lengths"].append(rec.end)
      out["prompt_lengths"].append(rec.start)
      out["group_id"].append(int(np.asarray(t.group_id)[i]))
      out["row"].append(i)
      out["turn_index"].append(j)
  if not out["row"]:                # no turn kept a token: one sample that trains on nothing
    return StepSamples(traj=_with_labels(t.select([0]), as_context(labels[:1])),
                       row=np.asarray([-1], np.int32), turn=np.asarray([-1], np.int32))
  traj = Trajectory(
      tokens=np.stack(out["tokens"]).astype(np.int32),
      labels=np.stack(out["labels"]).astype(labels.dtype),
      sampler_logprobs=np.stack(out["logprobs"]).astype(np.float32),
      group_id=np.asarray(out["group_id"], np.int32),
      turn=np.stack(out["turn"]).astype(np.int32),
      lengths=np.asarray(out["lengths"], np.int32),
      prompt_lengths=np.asarray(out["prompt_lengths"], np.int32))
  return StepSamples(traj=traj, row=np.asarray(out["row"], np.int32),
                     turn=np.asarray(out["turn_index"], np.int32))


def _with_labels(traj: Trajectory, labels: np.ndarray) -> Trajectory:
  return Trajectory(tokens=np.asarray(traj.tokens), labels=labels,
                    sampler_logprobs=np.zeros(np.asarray(traj.tokens).shape, np.float32),
                    group_id=np.asarray(traj.group_id), turn=np.asarray(traj.turn),
                    lengths=np.asarray(traj.lengths), prompt_lengths=np.asarray(traj.prompt_lengths))


def pad_samples(samples: StepSamples, multiple: int) -> StepSamples:
  """`samples` grown to a multiple of `multiple` rows with copies of sample 0 that train on
  nothing (row -1): copies of a real sample, not padding rows, so no attention row is empty."""
  n = samples.num_samples
  extra = -n % max(int(multiple), 1)
  if not extra:
    return samples
  index = np.concatenate([np.arange(n), np.zeros(extra, np.int64)])
  t = samples.traj.select(index)
  labels = np.asarray(t.labels).copy()
  labels[n:] = as_context(labels[n:])
  logprobs = np.asarray(t.sampler_logprobs).copy()
  logprobs[n:] = 0.0
  traj = Trajectory(tokens=np.asarray(t.tokens), labels=labels, sampler_logprobs=logprobs,
                    group_id=np.asarray(t.group_id), turn=np.asarray(t.turn),
                    lengths=np.asarray(t.lengths), prompt_lengths=np.asarray(t.prompt_lengths))
  return StepSamples(traj=traj, row=np.concatenate([samples.row, np.full(extra, -1, np.int32)]),
                     turn=np.concatenate([samples.turn, np.full(extra, -1, np.int32)]))


def step_samples(batch: RolloutBatch, multiple: int = 1) -> StepSamples:
  """The batch's step samples (recorded by a restart-context engine, else derived from the
  stream trajectories), padded to a multiple of `multiple` rows."""
  samples = batch.samples if batch.samples is not None else prefix_samples(batch)
  return pad_samples(samples, multiple)


def sample_rewards(samples: StepSamples, per_step: Sequence[Sequence[float]]) -> list[list[float]]:
  """Each sample's rewards as a one-step list: the reward of its (row, turn), which
  `ragjax.rl.token_rewards.place_rewards` puts on the sample's last trained token.
  `per_step[i]` is trajectory row i's per-turn reward list; padding samples get none."""
  return [[float(per_step[i][j])] if i >= 0 else [] for i, j in zip(samples.row, samples.turn)]
