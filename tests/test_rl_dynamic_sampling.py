"""Dynamic sampling (`rl.batch_filter = "filter_groups"`): groups whose score does not vary
are dropped by hand-checked rule, more questions are rolled out until the target is kept,
joined rollouts keep their records straight, and a step that keeps nothing skips its update
through the real trainer instead of raising."""

import jax
import numpy as np
import pytest

from resume_probe import build_trainer
from ragjax.rl.dynamic_sampling import GroupFilter
from ragjax.rl.run_config import RLConfig
from ragjax.rollout.labels import Source
from ragjax.rollout.trajectory import RolloutBatch, RowMeta, TrajectoryMeta, assemble, concat


def rows_of(groups):
  """RowMeta per (group id, answer) pair, in order."""
  return [RowMeta(row=i, group_id=g, prompt_index=g, sample_index=i, answer=a)
          for i, (g, a) in enumerate(groups)]


def test_filter_keeps_only_groups_whose_score_varies_by_hand():
  # group 0: rewards all 1 (dropped); group 1: 0 / 1 (kept); group 2: rewards equal (0.2 each)
  # but EM differs ("Paris" right, "Lyon" wrong); group 3: EM all 0, rewards differ
  groups = [(0, "Paris"), (0, "Paris"), (1, "Paris"), (1, "Lyon"),
            (2, "Paris"), (2, "Lyon"), (3, "Rome"), (3, "Lyon")]
  rows = rows_of(groups)
  examples = [{"golden_answers": ["Paris"]}] * 8
  rewards = np.asarray([1, 1, 0, 1, .2, .2, .1, .3], np.float32)
  by_reward = GroupFilter(metric="reward")
  assert by_reward.varied_groups(rows, rewards, examples) == [1, 3]
  by_em = GroupFilter(metric="em")
  assert by_em.varied_groups(rows, rewards, examples) == [1, 2]

  class Ctx:
    pass
  ctx = Ctx()
  ctx.rows, ctx.rewards, ctx.examples = rows, rewards, examples
  assert by_reward(ctx, {}) == [2, 3, 6, 7]
  assert by_reward.last == {"filter/groups": 4.0, "filter/varied_groups": 2.0,
                            "filter/kept_groups": 2.0, "filter/kept_fraction": 0.5}
  assert by_em(ctx, {}) == [2, 3, 4, 5]
  # a target: the first varied groups up to it; the shortfall is what is missing
  capped = GroupFilter(metric="reward", target_groups=1, max_batches=2)
  assert capped(ctx, {}) == [2, 3] and capped.last["filter/kept_groups"] == 1.0
  assert GroupFilter(metric="reward", target_groups=5, max_batches=2).shortfall(
      rows, rewards, examples) == 3
  assert GroupFilter(metric="reward").shortfall(rows, rewards, examples) == 0


def test_filter_kwargs_are_checked_with_the_config():
  with pytest.raises(ValueError, match="metric='accuracy'"):
    RLConfig(batch_filter="filter_groups", batch_filter_kwargs={"metric": "accuracy"})
  with pytest.raises(ValueError, match="max_batches > 1 resamples towards target_groups"):
    RLConfig(batch_filter="filter_groups", batch_filter_kwargs={"max_batches": 3})
  with pytest.raises(ValueError, match="rl.batch_filter_kwargs.keep"):
    RLConfig(batch_filter="filter_groups", batch_filter_kwargs={"keep": 3})


def test_concat_pads_renumbers_and_shifts_prompts():
  def batch(lengths, groups, prompts):
    traj = assemble([{"tokens": [7] * n, "labels": [Source.POLICY] * n, "logprobs": [-.5] * n,
                      "turns": [0] * n, "prompt_len": 1, "group_id": g}
                     for n, g in zip(lengths, groups)])
    metas = [RowMeta(row=i, group_id=g, prompt_index=p, sample_index=i)
             for i, (g, p) in enumerate(zip(groups, prompts))]
    metas[-1].clone_of = 0
    return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=metas), timings={"rollout_s": 1.0})
  a, b = batch([3, 5], [10, 10], [0, 0]), batch([12, 2, 4], [4, 4, 6], [0, 0, 1])
  joined = concat([a, b], [1, 2])
  assert joined.traj.tokens.shape == (5, 16)          # the widest (b: 12 -> 16)
  assert joined.traj.labels[0, 3:].tolist() == [Source.PAD] * 13
  assert [r.row for r in joined.rows] == [0, 1, 2, 3, 4]
  assert [r.prompt_index for r in joined.rows] == [0, 0, 1, 1, 2]
  assert [r.clone_of for r in joined.rows] == [None, 0, None, None, 2]
  assert joined.traj.group_id.tolist() == [10, 10, 4, 4, 6]
  assert joined.timings == {"rollout_s": 2.0}


FILTER = ["trainer.eval_every=0", "rl.batch_filter='filter_groups'"]


def test_resampling_until_the_target_through_the_real_trainer(tmp_path):
  # the probe's dense reward varies in every group of 4: 2 prompts give 2 groups, a target of
  # 3 needs a second generation batch (2 more prompts), and the 4th group is dropped
  t = build_trainer(str(tmp_path), 1, FILTER + [
      "rl.batch_filter_kwargs={'metric': 'reward', 'target_groups': 3, 'max_batches': 3}"])
  hist = t.train()
  m = hist[0]
  assert m["filter/generation_batches"] == 2 and m["trajectories_generated"] == 16
  assert m["filter/groups"] == 4 and m["filter/kept_groups"] == 3
  assert m["trajectories"] == 12 and "update_skipped" not in m
  assert t.cursor.state() == {"epoch": 0, "offset": 4}
  t.ckpt.close()


def test_a_step_that_keeps_no_group_skips_its_update(tmp_path):
  # an untrained tiny policy never answers "Quillport": EM is 0 in every group
  t = build_trainer(str(tmp_path), 1, FILTER + ["rl.batch_filter_kwargs={'metric': 'em'}"])
  before = [np.asarray(x) for x in jax.tree.leaves(t.state.params)]
  hist = t.train()
  m = hist[0]
  assert m["update_skipped"] == 1 and m["trajectories"] == 0
  assert m["filter/kept_groups"] == 0 and m["trajectories_generated"] == 8
  for a, b in zip(before, jax.tree.leaves(t.state.params)):
    np.testing.assert_array_equal(a, np.asarray(b))
  t.ckpt.close()
