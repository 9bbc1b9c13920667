"""REX-RAG's training side against hand-computed examples (seeds §1.4): Algorithm 1's prompt
PMF, the per-token mixture mu of the authors' code, the trajectory filter and its EWM keep
ratio; and the generic pieces it needs (row selection, zero-mask row padding)."""

import math
import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402
from _rl_helpers import random_rl_batch, tiny_cfg, tiny_params  # noqa: E402

from ragjax import registry  # noqa: E402
from ragjax.rl.batch import make_train_batch, pad_batch_rows  # noqa: E402
from ragjax.rl.run_config import RLConfig  # noqa: E402
from ragjax.rl.rex_rag.correction import (CONTINUATION, NONE, ORIGIN, ORIGINAL,  # noqa: E402
                                          PROBE_PROMPT, MixtureBehaviour, segment_kinds)
from ragjax.rl.rex_rag.metrics import rex_rag_metrics  # noqa: E402
from ragjax.rl.rex_rag.pmf import PromptPMF  # noqa: E402
from ragjax.rl.rex_rag.trajectory_filter import TrajectoryFilter, ewm  # noqa: E402
from ragjax.rl.step_context import StepContext  # noqa: E402
from ragjax.rl.train_step import policy_loss_fn, policy_objective  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.rex_rag import ABLATION_FIVE, EXPLORATION_PROMPTS, pool  # noqa: E402
from ragjax.rollout.segments import encode_text  # noqa: E402
from ragjax.rollout.trajectory import RolloutBatch, RowMeta, TrajectoryMeta, assemble  # noqa: E402

P, O, R, I, PAD = Source.PROMPT, Source.POLICY, Source.RETRIEVED, Source.INJECTED, Source.PAD

# A 3-prompt pool with shared prefixes, as token ids: 7 8 9 | 7 8 10 | 7 11
POOL = [[7, 8, 9], [7, 8, 10], [7, 11]]


def test_pmf_of_a_pool_with_shared_prefixes():
  pmf = PromptPMF(POOL)
  # first token 1 (the code's choice); then C[prefix][x] / sum C[prefix]
  np.testing.assert_allclose(pmf.token_probs([7, 8, 9]), [1, 2 / 3, 1 / 2])
  np.testing.assert_allclose(pmf.token_probs([7, 8, 10]), [1, 2 / 3, 1 / 2])
  np.testing.assert_allclose(pmf.token_probs([7, 11]), [1, 1 / 3])
  np.testing.assert_allclose(pmf.token_probs([7, 12]), [1, 0])      # unseen: no mass
  np.testing.assert_allclose(pmf.token_probs([7, 8, 11]), [1, 2 / 3, 0])
  assert pmf.prob([7], 8) == 2 / 3 and pmf.prob([5], 8) == 0.0
  assert [7, 11] in pmf and [7, 8] not in pmf
  coarse = PromptPMF(POOL, "coarse")   # Table 6's "Coarse PPD": 1/|pool| first, 1 after
  np.testing.assert_allclose(coarse.token_probs([7, 8, 9]), [1 / 3, 1, 1])
  with pytest.raises(ValueError, match="unknown probe prompt distribution"):
    PromptPMF(POOL, "bigram")


@pytest.mark.parametrize("indices", [None, ABLATION_FIVE])
def test_pmf_over_the_real_pool_is_the_uniform_draw(indices):
  """Tokenised with a real BPE tokenizer, the n-gram PMF factorises the hook's uniform draw:
  every pool prompt's tokens multiply to 1 / |pool| (all open with the same `<think>` token)."""
  tok = h.tokenizer()
  prompts = pool(indices)
  ids = [encode_text(tok, p) for p in prompts]
  assert len({x[0] for x in ids}) == 1
  pmf = registry.lookup("behaviour", "rex_rag")(
      tokenizer=tok, pool_name="all" if indices is None else "five").pmf
  assert pmf.pool == [tuple(x) for x in ids]
  for x in ids:
    assert np.prod(pmf.token_probs(x)) == pytest.approx(1 / len(prompts), rel=1e-12)


def build_batch(specs, width=10):
  """specs: (labels, group, clone_of, answer); tokens are 100 + position except the inserted
  prompt, which is the pool's prompt 7 11."""
  dicts, metas = [], []
  for i, (labels, group, clone_of, answer) in enumerate(specs):
    toks = [100 + j for j in range(len(labels))]
    inj = [j for j, lab in enumerate(labels) if lab == I]
    for k, j in enumerate(inj):
      toks[j] = POOL[2][k]
    p_len = sum(lab == P for lab in labels)
    dicts.append(dict(tokens=toks, labels=[int(x) for x in labels], logprobs=[0.0] * len(toks),
                      turns=[0] * len(toks), prompt_len=p_len, group_id=group))
    metas.append(RowMeta(row=i, group_id=group, prompt_index=group, sample_index=i,
                         clone_of=clone_of, answer=answer,
                         cloned_at_turn=None if clone_of is None else 0))
  traj = assemble(dicts, (width,))
  return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=metas))


ORIG = [P, P, O, O, O, O, O, O, O]
CLONE = [P, P, O, R, O, I, I, O, O]       # origin j = 3 (a retrieved token counts), prompt, cont


def hand_batch():
  """4 originals + 1 clone: a = 1/5."""
  return build_batch([(ORIG, 0, None, "x"), (ORIG, 0, None, "y"), (ORIG, 1, None, "z"),
                      (ORIG, 1, None, "w"), (CLONE, 0, 0, "v")])


def test_segments_of_a_clone_and_an_original():
  b = hand_batch()
  t = b.traj
  kinds = segment_kinds(np.asarray(t.labels[4]), 2, 9, True)
  assert kinds.tolist() == ([NONE] * 2 + [ORIGIN] * 3 + [PROBE_PROMPT] * 2 + [CONTINUATION] * 2
                            + [NONE])
  kinds = segment_kinds(np.asarray(t.labels[0]), 2, 9, False)
  assert kinds.tolist() == [NONE] * 2 + [ORIGINAL] * 7 + [NONE]


def test_mu_of_a_clone_and_an_original_by_hand():
  """a = 0.2, z = 0.125, j = 3, so z^(1/j) = 0.5 and the origin's pi_eps = 2 pi_old:
  mu = 0.8 pi_old + 0.2 * 2 pi_old = 1.2 pi_old.  Prompt tokens (7 11): 0.8 pi_old + 0.2 PMF
  with PMF = 1 (first token) and 1/3 (7 -> 11 in the pool).  Continuation: mu = pi_old.  Originals:
  mu = 0.8 pi_old, so the ratio is (1 + alpha) rho with alpha = a / (1 - a) = 0.25."""
  b = hand_batch()
  old = np.full((5, 10), np.log(0.3), np.float32)
  pi_clone = [0.5, 0.25, 0.8, 0.1, 0.2, 0.6, 0.9]
  old[4, 2:9] = np.log(pi_clone)
  state = {"rex_rag": {"step": {"rows": 5, "z": 0.125}}}
  log_mu = MixtureBehaviour(PromptPMF(POOL))(b, old, state)
  want = [0.6, 0.3, 0.96, 0.8 * 0.1 + 0.2 * 1.0, 0.8 * 0.2 + 0.2 / 3, 0.6, 0.9]
  np.testing.assert_allclose(np.exp(log_mu[4, 2:9]), want, rtol=1e-6)
  np.testing.assert_allclose(np.exp(log_mu[:4, 2:9]), 0.8 * 0.3, rtol=1e-6)
  np.testing.assert_array_equal(log_mu[:, :2], old[:, :2])         # prompt positions untouched
  # an original's ratio against mu is (1 + alpha) times its ratio against pi_old
  logp = np.log(np.float32(0.45))
  rho = np.exp(logp - old[0, 2])
  assert np.exp(logp - log_mu[0, 2]) == pytest.approx(1.25 * rho, rel=1e-6)
  # "w/o IS": the plain ratio
  np.testing.assert_array_equal(MixtureBehaviour(PromptPMF(POOL), False)(b, old, state), old)
  # coarse PPD: first prompt token 1/3, second 1
  coarse = MixtureBehaviour(PromptPMF(POOL, "coarse"))(b, old, state)
  np.testing.assert_allclose(np.exp(coarse[4, 5:7]), [0.08 + 0.2 / 3, 0.16 + 0.2], rtol=1e-6)


def test_the_loss_divides_by_mu():
  """policy_objective with the behaviour log-probs: its ratio is pi_theta / mu per token."""
  b = hand_batch()
  old = np.full((5, 10), np.log(0.3), np.float32)
  state = {"rex_rag": {"step": {"rows": 5, "z": 0.125}}}
  log_mu = MixtureBehaviour(PromptPMF(POOL))(b, old, state)
  labels = np.asarray(b.traj.labels)
  tb = make_train_batch(b.traj.tokens, labels, np.zeros(5), old, train_on=("policy", "injected"),
                        behaviour_logprobs=log_mu)
  logp = np.full((5, 10), np.log(0.36), np.float32)
  rl = RLConfig(kl_coef=0.0, train_on=("policy", "injected"))
  _, m = policy_objective(rl, logp, np.zeros_like(logp), tb, None)
  mask = np.asarray(tb.loss_mask) > 0
  assert float(m["ratio"]) == pytest.approx(np.exp(logp - log_mu)[mask].mean(), rel=1e-6)
  assert float(m["ratio"]) != pytest.approx(np.exp(logp - old)[mask].mean(), rel=1e-3)


def test_mu_errors_name_the_cause():
  b = hand_batch()
  old = np.zeros((5, 10), np.float32)
  with pytest.raises(ValueError, match="rl.batch_filter='rex_rag'"):
    MixtureBehaviour(PromptPMF(POOL))(b, old, {})
  with pytest.raises(ValueError, match="needs a batch with a wrong original"):
    MixtureBehaviour(PromptPMF(POOL))(b, old, {"rex_rag": {"step": {"rows": 5, "z": 0.0}}})
  with pytest.raises(ValueError, match="row 4: its inserted prompt is not one of"):
    MixtureBehaviour(PromptPMF([[7, 8]]))(b, old, {"rex_rag": {"step": {"rows": 5, "z": 0.5}}})


def test_ewm_is_pandas_adjust_false():
  assert ewm([0.08], 0.1) == 0.08
  assert ewm([0.08, 0.0], 0.1) == pytest.approx(0.072)
  assert ewm([0.08, 0.0, 1.0], 0.1) == pytest.approx(0.9 * 0.072 + 0.1)      # 0.1648
  assert ewm([0.5, 1.0, 0.0, 0.5], 0.5) == pytest.approx(((0.75 * 0.5) + 0) * 0.5 + 0.25)


def filter_ctx(batch, old, answers_ok, num_prompts=2, group_size=2, state=None, sampler=False,
               train_on=("policy", "injected")):
  examples = [{"golden_answers": ["gold"]} for _ in batch.rows]
  for row, ok in zip(batch.rows, answers_ok):
    row.answer = "gold" if ok else "wrong"
  rl = RLConfig(train_on=train_on, use_sampler_logprobs=sampler)
  return StepContext(step=1, rollout=batch, examples=examples, rewards=np.zeros(len(examples)),
                     old_logprobs=old, loss_mask=np.zeros_like(old), num_prompts=num_prompts,
                     group_size=group_size, rl=rl, method_state=state if state is not None else {})


def filter_batch():
  """2 prompts x G = 2 originals, then 3 clones whose inserted prompts average -1, -0.5, -2."""
  b = build_batch([(ORIG, 0, None, ""), (ORIG, 0, None, ""), (ORIG, 1, None, ""),
                   (ORIG, 1, None, ""), (CLONE, 0, 0, ""), (CLONE, 0, 1, ""), (CLONE, 1, 2, "")])
  b.stats = {"rex_rag_clone/eligible": 4, "rex_rag_clone/made": 3, "rex_rag_clone/overflow": 1}
  old = np.zeros((7, 10), np.float32)
  old[4, 5:7] = [-1.5, -0.5]
  old[5, 5:7] = [-0.25, -0.75]
  old[6, 5:7] = [-2.0, -2.0]
  return b, old


def test_trajectory_filter_keeps_the_likeliest_prompts_and_updates_the_history():
  b, old = filter_batch()
  state = {}
  f = TrajectoryFilter(keep_ratio=0.5)
  ok = [1, 0, 0, 0, 1, 0, 1]
  keep = f(filter_ctx(b, old, ok, state=state), state)
  # keep_num = int(2 x 2 x 0.5) = 2: the clones scoring -0.5 (row 5) and -1 (row 4)
  assert keep == [0, 1, 2, 3, 4, 5]
  rec = state["rex_rag"]["step"]
  assert rec["keep_num"] == 2 and rec["clones_made"] == 3 and rec["clones_kept"] == 2
  assert rec["eligible"] == 4 and rec["overflow"] == 1 and rec["rows"] == 6
  assert rec["acc_original"] == 0.25 and rec["z"] == 0.75
  assert rec["acc_probe"] == 0.5 and rec["acc_probe_made"] == pytest.approx(2 / 3)
  assert rec["a"] == pytest.approx(2 / 6) and rec["keep_ratio"] == 0.5
  assert state["rex_rag"]["keep_history"] == [0.5, 0.5]
  # next step: keep_ratio = EWM([0.5, 0.5]) = 0.5; all kept clones wrong -> history grows by 0
  keep = f(filter_ctx(b, old, [1, 0, 0, 0, 0, 0, 0], state=state), state)
  assert state["rex_rag"]["keep_history"] == [0.5, 0.5, 0.0]
  assert TrajectoryFilter(keep_ratio=0.5)(filter_ctx(b, old, ok, state=state), state) == \
      [0, 1, 2, 3, 5]      # EWM([0.5, 0.5, 0]) = 0.45 -> int(1.8) = 1 clone


def test_fixed_keep_share_ignores_the_probe_accuracy():
  """adaptive=False (Table 4's reading): keep int(B x G x keep_ratio) clones every step, where
  the code's EWM would have moved to EWM([0.5, 0.5, 0]) = 0.45 -> 1 clone."""
  b, old = filter_batch()
  state = {}
  f = TrajectoryFilter(keep_ratio=0.5, adaptive=False)
  for ok in ([1, 0, 0, 0, 1, 0, 1], [1, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 1, 0, 1]):
    assert f(filter_ctx(b, old, ok, state=state), state) == [0, 1, 2, 3, 4, 5]
    assert state["rex_rag"]["step"]["keep_ratio"] == 0.5


def test_trajectory_filter_switches_and_errors():
  b, old = filter_batch()
  ok = [0] * 7
  state = {}
  assert TrajectoryFilter(keep_ratio=0.0, enabled=False)(filter_ctx(b, old, ok, state=state),
                                                         state) == list(range(7))
  state = {}
  keep = TrajectoryFilter(keep_ratio=0.75, multiple_of=2)(filter_ctx(b, old, ok, state=state),
                                                          state)
  assert keep == [0, 1, 2, 3, 4, 5]                  # int(3) rounded down to 2
  assert state["rex_rag"]["keep_history"] == [0.75, 0.0]
  state = {}
  TrajectoryFilter(keep_ratio=0.1)(filter_ctx(b, old, ok, state=state), state)
  assert state["rex_rag"]["keep_history"] == [0.1]   # nothing kept: no accuracy to record
  # the sampler's log-probs with the clones re-scored (they train on their inserted prompt)
  state = {}
  assert TrajectoryFilter(keep_ratio=0.5)(filter_ctx(b, old, ok, sampler=True, state=state),
                                          state) == [0, 1, 2, 3, 4, 5]
  with pytest.raises(ValueError, match="rl.use_sampler_logprobs=False"):
    TrajectoryFilter()(filter_ctx(b, old, ok, sampler=True, train_on=("policy",)), {})


def test_metric_reports_the_record_and_mu_by_segment():
  b = hand_batch()
  old = np.full((5, 10), np.log(0.3), np.float32)
  state = {"rex_rag": {"step": {"rows": 5, "z": 0.125, "a": 0.2, "clones_made": 2,
                                "clones_kept": 1, "acc_probe": None}}}
  log_mu = MixtureBehaviour(PromptPMF(POOL))(b, old, state)
  ctx = filter_ctx(b, old, [0] * 5, state=state)
  ctx.loss_mask = np.isin(np.asarray(b.traj.labels), [O, I]).astype(np.float32)
  ctx.behaviour_logprobs = log_mu
  out = rex_rag_metrics(b.rows, ctx.examples, ctx=ctx)
  assert out["a"] == 0.2 and out["clones_made"] == 2 and "acc_probe" not in out
  assert out["max_group"] == 3                       # group 0: 2 originals + the clone
  assert out["mu_over_old/original"] == pytest.approx(0.8)
  assert out["mu_over_old/origin"] == pytest.approx(1.2)   # the retrieved token is not trained
  assert out["mu_over_old/continuation"] == pytest.approx(1.0)
  assert out["mu_over_old/prompt"] == pytest.approx(((0.24 + 0.2) + (0.24 + 0.2 / 3)) / 0.3 / 2)
  mask = ctx.loss_mask > 0
  assert out["ratio_at_old"] == pytest.approx(np.exp(old - log_mu)[mask].mean())


def test_select_renumbers_rows_and_clone_sources():
  b, _ = filter_batch()
  s = b.select([0, 2, 4, 6])
  assert [r.row for r in s.rows] == [0, 1, 2, 3]
  assert [r.clone_of for r in s.rows] == [None, None, 0, 1]      # row 6 cloned row 2 -> 1
  assert b.select([1, 5]).rows[1].clone_of == 0                    # row 5 cloned row 1
  assert b.select([5]).rows[0].clone_of == -1                     # source not selected
  np.testing.assert_array_equal(s.traj.tokens, np.asarray(b.traj.tokens)[[0, 2, 4, 6]])
  assert s.stats == b.stats
  with pytest.raises(ValueError, match="distinct indices"):
    b.select([0, 0])


def test_zero_mask_padding_rows_leave_the_update_unchanged():
  cfg, params = tiny_cfg(), tiny_params()
  batch = random_rl_batch(cfg, params, b=6, t=16)
  padded = pad_batch_rows(batch, 8)
  assert padded.tokens.shape[0] == 8 and float(padded.loss_mask[6:].sum()) == 0
  rl = RLConfig(kl_coef=0.01)
  loss_fn, denom = policy_loss_fn(cfg, rl)
  grad = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(p, b, denom(b)), has_aux=True))
  (l0, m0), g0 = grad(params, batch)
  (l1, m1), g1 = grad(params, padded)
  # Same sums in another summation order: the loss (-0.0047 here) is a small difference of
  # O(1) per-token terms, so float32 rounding shows as ~1e-7 absolute, not as a relative error.
  assert float(l1) == pytest.approx(float(l0), rel=1e-5, abs=2e-7)
  for k in ("pg_loss", "kl", "entropy", "ratio"):
    assert float(m1[k]) == pytest.approx(float(m0[k]), rel=1e-5, abs=2e-7), k
  worst = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)))
  assert worst < 1e-6
  assert pad_batch_rows(batch, 6) is batch
  with pytest.raises(ValueError, match="cannot pad"):
    pad_batch_rows(batch, 4)
  assert math.isfinite(worst)
