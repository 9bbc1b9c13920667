"""One RL step's batch, built once: a per-row bundle the trainer fills step by step.

    sb = build_step_batch(rollout, results, train_on=..., step_samples=..., multiple=...)
    sb = sb.replace(old_logprobs=..., ref_logprobs=...)   # the scoring forwards
    sb = sb.select(keep)                                   # a batch filter (REX-RAG)
    advantages, returns = step_advantages(sb, rl)
    train_batch = to_train_batch(sb, advantages, rl, behaviour=..., returns=returns)

Every field is per row: `select(keep)` re-indexes each one (an array, a list, or anything with
its own `select`, such as the `RolloutBatch`), so a new per-row field needs no edit elsewhere.
The masks, attention and positions are built here once from the labels
(`ragjax.rollout.labels.masks`) and reused by the scoring forwards, the advantages, the metrics
and the `TrainBatch`.

The trajectory fields (`rollout`, `results`, `rewards`) hold one entry per rollout row; the
sequence fields (tokens ... values) one per trained sequence.  Those are the rows, or with
`rl.step_samples` (R3-RAG) each row's step samples (`samples`, set then), which no row filter
can select from (`RLConfig` forbids the pair).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from ragjax.rl import advantages as adv_lib
from ragjax.rl.batch import TrainBatch, make_train_batch
from ragjax.rl.losses import kl_penalty
from ragjax.rl.rewards import RewardResult
from ragjax.rl.masks import Masks, masks as label_masks, token_mask
from ragjax.rl.step_samples import sample_rewards, step_samples as make_step_samples
from ragjax.rl.token_rewards import place_rewards
from ragjax.rollout.trajectory import RolloutBatch, StepSamples


@dataclasses.dataclass
class StepBatch:
  """The step's rows; optional fields are None until the step that fills them."""
  # one entry per rollout row
  rollout: RolloutBatch             # the trajectories and their records (`rows`)
  results: list[RewardResult]       # each row's reward: total, per step, components
  rewards: np.ndarray               # [R] float32 total reward
  # one entry per trained sequence (the rows, or their step samples)
  tokens: np.ndarray                # [N, T] int32
  labels: np.ndarray                # [N, T] `Source`
  loss_mask: np.ndarray             # [N, T] float32
  attention_mask: np.ndarray        # [N, T] int32
  positions: np.ndarray             # [N, T] int32
  group_id: np.ndarray              # [N] the prompt's uid
  sampler_logprobs: np.ndarray      # [N, T] what the sampler recorded
  step_rewards: list[list[float]]   # [N] per-step rewards to place on the tokens
  step_ends: list[list[int]]        # [N] each step's last token (-1: none)
  old_logprobs: Optional[np.ndarray] = None   # [N, T] log pi_old
  ref_logprobs: Optional[np.ndarray] = None   # [N, T] the frozen reference's
  values: Optional[np.ndarray] = None         # [N, T] the critic's
  samples: Optional[StepSamples] = None       # the step samples, when the sequences are them

  @property
  def rows(self):
    return self.rollout.rows

  @property
  def masks(self) -> Masks:
    return Masks(loss=self.loss_mask, attention=self.attention_mask, positions=self.positions)

  def replace(self, **fields) -> "StepBatch":
    return dataclasses.replace(self, **fields)

  def select(self, keep: Sequence[int]) -> "StepBatch":
    """The batch of rows `keep` (in that order), every per-row field re-indexed."""
    if self.samples is not None:
      raise ValueError("select: this batch trains on step samples, not on its rows")
    keep = [int(i) for i in keep]
    return dataclasses.replace(self, **{f.name: _take(f.name, getattr(self, f.name), keep)
                                        for f in dataclasses.fields(self)})


def _take(name: str, value: Any, keep: list[int]):
  if value is None:
    return None
  if hasattr(value, "select"):
    return value.select(keep)
  if isinstance(value, np.ndarray):
    return value[keep]
  if isinstance(value, list):
    return [value[i] for i in keep]
  raise TypeError(f"StepBatch.{name}: cannot select rows of a {type(value).__name__}")


def build_step_batch(rollout: RolloutBatch, results: Sequence[RewardResult], *,
                     train_on: Sequence[str], step_samples: bool = False,
                     multiple: int = 1) -> StepBatch:
  """The step's batch from the rollout and its rewards: the rows, or their step samples
  (padded to a multiple of `multiple`), with their masks built once."""
  results = list(results)
  samples = None
  if step_samples:   # every turn its own sample: tokens, old/ref/values per sample
    samples = make_step_samples(rollout, multiple)
    seq = samples.traj
    step_rewards = sample_rewards(samples, [r.per_step for r in results])
    step_ends = [[] for _ in step_rewards]
  elif rollout.samples is not None:
    raise ValueError(f"protocol {rollout.meta.protocol!r} prompts every turn afresh "
                     f"(protocol.context='restart'): train on its step samples with "
                     f"rl.step_samples=True")
  else:
    seq = rollout.traj
    step_rewards = [r.per_step for r in results]
    step_ends = [row.step_ends for row in rollout.rows]
  labels = np.asarray(seq.labels)
  m = label_masks(labels, train_on)
  return StepBatch(rollout=rollout, results=results,
                   rewards=np.asarray([r.total for r in results], np.float32),
                   tokens=np.asarray(seq.tokens), labels=labels, loss_mask=m.loss,
                   attention_mask=m.attention, positions=m.positions,
                   group_id=np.asarray(seq.group_id),
                   sampler_logprobs=np.asarray(seq.sampler_logprobs),
                   step_rewards=step_rewards, step_ends=step_ends, samples=samples)


def critic_mask(sb: StepBatch, rl) -> np.ndarray:
  """[N, T] the tokens the critic values, runs GAE over and regresses on (`rl.critic_mask`):
  the policy's loss mask, or the response's every token (verl)."""
  return sb.loss_mask if rl.critic_mask == "loss" else token_mask(sb.labels, rl.critic_mask)


def whiten_mask(sb: StepBatch, rl) -> np.ndarray:
  """[N, T] the tokens the GAE advantages are whitened over (`rl.adv_whiten_mask`)."""
  return sb.loss_mask if rl.adv_whiten_mask == "loss" else token_mask(sb.labels,
                                                                      rl.adv_whiten_mask)


def step_advantages(sb: StepBatch, rl) -> tuple[np.ndarray, Optional[np.ndarray]]:
  """([N, T] advantages, [N, T] critic returns or None): the registered critic estimator (GAE)
  over the critic's tokens (`rl.critic_mask`) with the token rewards placed on the trained ones
  (less the KL penalty with `rl.kl_in_reward`), whitened over `rl.adv_whiten_mask`'s tokens as
  `rl.adv_whiten` says, when the run has a critic, else the registered outcome estimator over
  each group's rewards.  The advantages are trained on the loss mask's tokens only."""
  if not rl.uses_critic:
    return adv_lib.outcome_advantages(rl.advantage, sb.rewards, sb.group_id, sb.loss_mask,
                                      eps=rl.adv_eps), None
  token_r = place_rewards(sb.step_rewards, sb.loss_mask, sb.step_ends)
  if rl.kl_in_reward and sb.ref_logprobs is not None:
    token_r = token_r - rl.kl_coef * np.asarray(
        kl_penalty(jnp.asarray(sb.old_logprobs), jnp.asarray(sb.ref_logprobs), "k1")) * sb.loss_mask
  a, ret = adv_lib.critic_advantages(rl.advantage, token_r, sb.values, critic_mask(sb, rl),
                                     gamma=rl.gamma, lam=rl.lam)
  # the returns the critic regresses on are GAE's own; only the advantages are whitened
  return (adv_lib.whiten_advantages(np.asarray(a), whiten_mask(sb, rl), rl.adv_whiten),
          np.asarray(ret))


def to_train_batch(sb: StepBatch, advantages: np.ndarray, rl, *,
                   behaviour: Optional[np.ndarray] = None,
                   returns: Optional[np.ndarray] = None) -> TrainBatch:
  """The update's batch, on the step batch's masks (the reference log-probs only for a KL
  loss: with `rl.kl_in_reward` the KL is in the reward)."""
  return make_train_batch(sb.tokens, sb.labels, advantages, sb.old_logprobs,
                          train_on=rl.train_on, masks=sb.masks, behaviour_logprobs=behaviour,
                          ref_logprobs=sb.ref_logprobs if not rl.kl_in_reward else None,
                          returns=returns, old_values=sb.values, gather=rl.gather,
                          critic_mask=(critic_mask(sb, rl) if returns is not None
                                       and rl.critic_mask != "loss" else None))
