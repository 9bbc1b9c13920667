"""The step batch (`ragjax.rl.step_batch`): built once from a rollout and its rewards, its
`select(keep)` re-indexes every per-row field (a new one included, with no other edit), and its
TrainBatch is the one `make_train_batch` builds from the labels."""

import dataclasses

import numpy as np
import pytest

from ragjax.rl.batch import make_train_batch
from ragjax.rl.rewards import RewardResult
from ragjax.rl.step_batch import StepBatch, build_step_batch, to_train_batch
from ragjax.rollout.labels import Source
from ragjax.rollout.trajectory import (RolloutBatch, RowMeta, TrajectoryMeta, TurnRecord,
                                       assemble)

P, POL, RET = int(Source.PROMPT), int(Source.POLICY), int(Source.RETRIEVED)


def rollout(n=3):
  """n rows [prompt x2 | policy x(i+1) | retrieved | policy], group = i // 2, row i's tokens
  all equal to 10 i + position."""
  rows, metas = [], []
  for i in range(n):
    labels = [P, P] + [POL] * (i + 1) + [RET, POL]
    turns = [-1, -1] + [0] * (i + 2) + [1]
    rows.append(dict(tokens=[10 * i + k for k in range(len(labels))], labels=labels,
                     logprobs=[-0.1 * i] * len(labels), turns=turns, prompt_len=2,
                     group_id=i // 2))
    end0 = 3 + i
    metas.append(RowMeta(row=i, group_id=i // 2, prompt_index=i // 2, sample_index=i % 2,
                         answer=f"a{i}", turns=[TurnRecord(0, "search", "q", 2, end0),
                                                TurnRecord(1, "answer", "a", end0 + 1, end0 + 2)]))
  return RolloutBatch(traj=assemble(rows, widths=(16,)), meta=TrajectoryMeta(rows=metas),
                      stats={"clones": 1.0})


def results(n=3):
  return [RewardResult(total=float(i) + 0.5, per_step=[0.5, float(i)], components={"em": i})
          for i in range(n)]


def test_select_reindexes_every_per_row_field_a_new_one_included():
  sb = build_step_batch(rollout(), results(), train_on=("policy",))
  sb = sb.replace(old_logprobs=np.arange(3 * 16, dtype=np.float32).reshape(3, 16))
  keep = [2, 0]
  out = sb.select(keep)
  for f in dataclasses.fields(StepBatch):
    value, got = getattr(sb, f.name), getattr(out, f.name)
    if value is None:
      assert got is None, f.name
    elif isinstance(value, np.ndarray):
      np.testing.assert_array_equal(got, value[keep], err_msg=f.name)
    elif isinstance(value, list):
      assert got == [value[i] for i in keep], f.name
  assert [r.answer for r in out.rows] == ["a2", "a0"] and [r.row for r in out.rows] == [0, 1]
  np.testing.assert_array_equal(out.rollout.traj.tokens, np.asarray(sb.rollout.traj.tokens)[keep])
  assert out.rollout.stats == {"clones": 1.0}
  np.testing.assert_array_equal(out.rewards, [2.5, 0.5])
  assert out.step_ends == [[4, 6], [2, 4]] and out.step_rewards == [[0.5, 2.0], [0.5, 0.0]]
  np.testing.assert_array_equal(out.loss_mask[0], [0, 0, 1, 1, 1, 0, 1] + [0] * 9)

  # a per-row field added to the bundle follows `select` with no edit anywhere else
  @dataclasses.dataclass
  class Wider(StepBatch):
    entropy: np.ndarray = None
    notes: list = None
  wide = Wider(**{f.name: getattr(sb, f.name) for f in dataclasses.fields(StepBatch)},
               entropy=np.array([0.1, 0.2, 0.3]), notes=["x", "y", "z"])
  picked = wide.select(keep)
  np.testing.assert_array_equal(picked.entropy, [0.3, 0.1])
  assert picked.notes == ["z", "x"] and isinstance(picked, Wider)


def test_step_samples_batch_refuses_select_and_places_each_turn_reward():
  sb = build_step_batch(rollout(2), results(2), train_on=("policy",), step_samples=True,
                        multiple=8)
  assert sb.tokens.shape == (8, 16) and list(sb.samples.row) == [0, 0, 1, 1, -1, -1, -1, -1]
  assert sb.step_rewards[:5] == [[0.5], [0.0], [0.5], [1.0], []]
  assert sb.rewards.shape == (2,)                 # the trajectory fields stay per row
  with pytest.raises(ValueError, match="trains on step samples"):
    sb.select([0])


def test_train_batch_reuses_the_step_masks_and_matches_make_train_batch():
  class RL:
    train_on, kl_in_reward, gather = ("policy",), False, True
  sb = build_step_batch(rollout(), results(), train_on=RL.train_on)
  old = np.full(sb.tokens.shape, -0.5, np.float32)
  sb = sb.replace(old_logprobs=old, ref_logprobs=old - 0.1).select([1, 2])
  adv = np.ones(sb.tokens.shape, np.float32)
  got = to_train_batch(sb, adv, RL)
  want = make_train_batch(sb.tokens, sb.labels, adv, sb.old_logprobs, train_on=RL.train_on,
                          ref_logprobs=sb.ref_logprobs, gather=True)
  for f in dataclasses.fields(want):
    a, b = getattr(got, f.name), getattr(want, f.name)
    assert (a is None) == (b is None), f.name
    if a is not None:
      assert a.dtype == b.dtype, f.name
      np.testing.assert_array_equal(a, b, err_msg=f.name)
  with pytest.raises(ValueError, match=r"masks must be \[B, T\]"):
    make_train_batch(sb.tokens, sb.labels, adv, old[:2], masks=sb.select([0]).masks)
