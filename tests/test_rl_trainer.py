"""The trainer loop end to end through the real engine (JAX sampler, Search-R1 protocol, BM25)
on the tiny preset: PPO with a critic, keep-best on dev, JSONL + TensorBoard logs, the NaN/Inf
guard, a metrics log that survives kills; and SFT through the same step machinery."""

import glob
import math
import os

import jax
import numpy as np
import optax
import pytest

from _rl_helpers import tiny_cfg, tiny_params
from resume_probe import build_trainer
from ragjax.rl.logprobs import full_logprobs
from ragjax.rl.metrics_log import MetricsLog
from ragjax import registry
from ragjax.rl.sft import make_sft_batch, sft_loss_fn
from ragjax.rl.train_step import init_train_state, make_update
from ragjax.rl.trainer import NonFiniteError
from ragjax.rollout.dump import read_jsonl
from ragjax.rollout.labels import Source
from ragjax.rollout.viewer import page_html

_CALLS = {"n": 0}


@registry.register("reward", "test_nan_after_first_step")
def nan_after_first_step(ctx):
  _CALLS["n"] += 1
  return 0.5 if _CALLS["n"] <= 8 else float("nan")    # 8 trajectories per step


def test_ppo_loop_logs_keeps_best_and_updates_critic(tmp_path):
  trainer = build_trainer(str(tmp_path), 2, ["rl.advantage='gae'", "rl.group_size=4",
                                             "trainer.save_every=2", "trainer.dump_every=2"])
  critic0 = jax.device_get(trainer.critic.params)
  hist = trainer.train()
  assert [h["step"] for h in hist] == [1, 2]
  for key in ("reward", "em", "f1", "response_length", "searches_per_traj", "entropy", "kl",
              "clip_frac", "critic/value_loss", "time/rollout_s", "time/retrieval_s",
              "time/update_s", "time/logprob_s", "tokens_per_s"):
    assert key in hist[-1] and math.isfinite(hist[-1][key]), key
  # PPO scores the batch (old log-probs, critic values): a timed forward; positions count
  # the padded batch the update runs on, trained tokens its loss mask.
  assert hist[-1]["time/logprob_s"] > 0
  assert hist[-1]["positions"] % 8 == 0 and hist[-1]["positions"] >= hist[-1]["tokens"]
  assert 0 < hist[-1]["trained_tokens"] <= 8 * 12
  # 2 prompts x 4 samples, 2 turns of at most 6 policy tokens each through the real engine
  assert hist[-1]["trajectories"] == 8 and 0 < hist[-1]["response_length"] <= 12
  head = np.asarray(trainer.critic.params["value_head"]["kernel"])
  assert np.abs(head - np.asarray(critic0["value_head"]["kernel"])).max() > 0
  rows = MetricsLog(os.path.join(trainer.workdir, "metrics.jsonl")).read()
  assert [r["step"] for r in rows] == [1, 2] and "dev/em" in rows[1]
  assert glob.glob(os.path.join(trainer.workdir, "tb", "events.out.tfevents.*"))
  assert trainer.ckpt.latest_step() == 2 and trainer.ckpt.best_step() == 2
  best, meta = trainer.ckpt.restore_best(trainer.state.params)
  assert "dev/em" in meta["metrics"]
  np.testing.assert_array_equal(best["norm"]["scale"], trainer.state.params["norm"]["scale"])
  # trainer.dump_every=2: step 2's sampled rollouts, each with its reward and gold answers
  assert sorted(os.listdir(os.path.join(trainer.workdir, "rollouts"))) == ["step_000002.jsonl"]
  dump = read_jsonl(os.path.join(trainer.workdir, "rollouts", "step_000002.jsonl"))
  assert len(dump) == 8 and {r["step"] for r in dump} == {2}
  assert all(r["golden_answers"] and r["question"] for r in dump)
  assert np.mean([r["reward"] for r in dump]) == pytest.approx(hist[-1]["reward"])
  assert "<html" in page_html(dump, title="step 2").lower()


def test_nan_guard_stops_and_keeps_last_good_checkpoint(tmp_path):
  _CALLS["n"] = 0
  trainer = build_trainer(str(tmp_path), 3, ["rl.rewards={'test_nan_after_first_step': 1.0}",
                                             "trainer.eval_every=0"])
  with pytest.raises(NonFiniteError, match=r"non-finite .* step 2 .* Last good checkpoint: step 1"):
    trainer.train()
  assert trainer.ckpt.latest_step() == 1


def test_nan_guard_checks_the_params_it_would_save(tmp_path):
  """A huge learning rate gives finite metrics but non-finite params: never saved."""
  trainer = build_trainer(str(tmp_path), 2, ["optim.lr=1e39", "optim.warmup_steps=0",
                                             "optim.schedule='constant'", "rl.mini_batch_size=0",
                                             "trainer.eval_every=0"])
  with pytest.raises(NonFiniteError, match=r"nonfinite_params.* step 1 .* checkpoint: step None"):
    trainer.train()
  assert trainer.ckpt.latest_step() is None


class FlakyEngine:
  """The real engine behind a retriever that is down (past its deadline) for the first
  `failures` rollouts (the tiny random policy rarely searches, so the fault is injected at
  the engine's entry, where a down retriever's error surfaces)."""

  def __init__(self, engine, failures):
    self.engine, self.failures, self.calls = engine, failures, 0
    self.sampler = engine.sampler

  def set_params(self, params) -> None:
    self.engine.set_params(params)

  def run(self, *args, **kwargs):
    from ragjax.retrieval.client import RetrievalUnavailable
    self.calls += 1
    if self.calls <= self.failures:
      raise RetrievalUnavailable("POST http://127.0.0.1:1/retrieve failed after 9 attempts")
    return self.engine.run(*args, **kwargs)


def test_a_step_whose_retriever_stays_down_is_rerun_from_its_start(tmp_path):
  """Same key, data position and method state on the rerun: the metrics equal a run whose
  retriever never failed; past trainer.step_retries the run stops naming the step."""
  ref = build_trainer(str(tmp_path / "ref"), 1, ["trainer.eval_every=0"])
  ref_hist = ref.train()
  flaky = build_trainer(str(tmp_path / "flaky"), 1, ["trainer.eval_every=0"])
  flaky.engine = FlakyEngine(flaky.engine, failures=2)
  with pytest.warns(UserWarning, match="rerunning it"):
    hist = flaky.train()
  assert hist[0]["step_retries"] == 2 and ref_hist[0]["step_retries"] == 0
  for k in ("loss", "reward", "grad_norm", "response_length"):
    assert hist[0][k] == pytest.approx(ref_hist[0][k], rel=1e-6, abs=1e-8), k
  dead = build_trainer(str(tmp_path / "dead"), 1, ["trainer.eval_every=0",
                                                   "trainer.step_retries=1"])
  dead.engine = FlakyEngine(dead.engine, failures=100)
  from ragjax.errors import ServiceUnavailable
  with pytest.raises(ServiceUnavailable, match="step 1: .* gave up after 2 attempts"), \
       pytest.warns(UserWarning):
    dead.train()


def test_metrics_log_survives_torn_lines_and_kills(tmp_path):
  log = MetricsLog(str(tmp_path / "metrics.jsonl"))
  for step in (1, 2, 3):
    log.append({"step": step, "loss": 0.1 * step})
  with open(log.path, "a") as f:
    f.write('{"step": 4, "lo')              # a kill mid-write
  assert [r["step"] for r in log.read()] == [1, 2, 3]
  log.truncate(2)
  assert [r["step"] for r in log.read()] == [1, 2]
  log.truncate(None)                        # no checkpoint finished: the log restarts empty
  assert log.read() == [] and os.path.exists(log.path)


def test_resume_without_a_finished_checkpoint_clears_the_log(tmp_path):
  trainer = build_trainer(str(tmp_path), 1, ["trainer.eval_every=0"])
  os.makedirs(trainer.workdir, exist_ok=True)
  MetricsLog(os.path.join(trainer.workdir, "metrics.jsonl")).append({"step": 1, "loss": 0.0})
  assert trainer.maybe_resume() == 0
  assert MetricsLog(os.path.join(trainer.workdir, "metrics.jsonl")).read() == []


def test_sft_matches_reference_nll_and_learns():
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, cfg.vocab_size, (4, 12)).astype(np.int32)
  labels = np.full((4, 12), Source.POLICY)
  labels[:, :3] = Source.PROMPT
  labels[:, 6:8] = Source.RETRIEVED
  labels[3, 10:] = Source.PAD
  batch = make_sft_batch(tokens, labels)
  loss_fn, denom = sft_loss_fn(cfg, chunk=100)
  # reference: full logits, naive masked mean over trained tokens
  from ragjax.models.decoder import Decoder
  hidden, _ = Decoder(cfg).apply({"params": params}, batch.tokens, batch.positions,
                                 batch.attention_mask, return_hidden=True)
  lp, _ = full_logprobs(hidden[:, :-1], params["embed_tokens"]["embedding"].T, batch.tokens[:, 1:])
  m = np.asarray(batch.loss_mask)[:, 1:]
  want = -(np.asarray(lp) * m).sum() / m.sum()
  got, _ = loss_fn(params, batch, denom(batch))
  assert float(got) == pytest.approx(want, rel=1e-5)
  assert m.sum() == 4 * 7 - 2      # 7 policy tokens a row; prompt, retrieved, padding excluded
  opt = optax.adam(1e-2)
  step = jax.jit(make_update(loss_fn, denom, opt, num_micro=2))
  state = init_train_state(params, opt)
  losses = []
  for _ in range(15):
    state, metrics = step(state, batch)
    losses.append(float(metrics["nll"]))
  assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_sft_gathered_loss_equals_dense_loss_and_grads(agg):
  """Projecting only the trained positions gives the same loss and gradients."""
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(1)
  tokens = rng.integers(1, cfg.vocab_size, (4, 20)).astype(np.int32)
  labels = np.full((4, 20), Source.RETRIEVED)
  labels[:, :4] = Source.PROMPT
  labels[0, 5:9] = labels[1, 12:19] = labels[2, 4:6] = Source.POLICY
  labels[3, 15:] = Source.PAD          # row 3 trains on nothing
  dense, gathered = make_sft_batch(tokens, labels), make_sft_batch(tokens, labels, gather=True)
  assert gathered.loss_index.shape == (4, 16)   # longest row trains on 7 -> bucket 16
  assert float(gathered.loss_weight.sum()) == float(dense.loss_mask.sum()) == 13
  loss_fn, denom = sft_loss_fn(cfg, agg=agg, chunk=100)
  grad = jax.value_and_grad(loss_fn, has_aux=True)
  (l_d, _), g_d = grad(params, dense, denom(dense))
  (l_g, _), g_g = grad(params, gathered, denom(gathered))
  assert float(l_g) == pytest.approx(float(l_d), rel=1e-5)
  for a, b in zip(jax.tree.leaves(g_d), jax.tree.leaves(g_g)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)
  # and through micro-batches (rows split, gathered arrays split with them)
  opt = optax.sgd(0.1)
  s_d, _ = jax.jit(make_update(loss_fn, denom, opt, 1))(init_train_state(params, opt), dense)
  s_g, _ = jax.jit(make_update(loss_fn, denom, opt, 2))(init_train_state(params, opt), gathered)
  for a, b in zip(jax.tree.leaves(s_d.params), jax.tree.leaves(s_g.params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_sft_context_auxiliary_is_the_policy_nll_plus_weighted_context_nll():
  """context=True: loss = NLL over policy tokens + w * mean NLL over the other real tokens
  (prompt and documents), checked against full logits; padding and position 0 never count."""
  cfg, params = tiny_cfg(), tiny_params()
  rng = np.random.default_rng(2)
  tokens = rng.integers(1, cfg.vocab_size, (3, 14)).astype(np.int32)
  labels = np.full((3, 14), Source.RETRIEVED)
  labels[:, :3] = Source.PROMPT
  labels[:, 8:11] = Source.POLICY
  labels[2, 12:] = Source.PAD
  batch = make_sft_batch(tokens, labels, context=True)
  ctx = np.asarray(batch.context_mask)
  assert ctx[:, 0].sum() == 0 and ctx[2, 12:].sum() == 0 and ctx[:, 8:11].sum() == 0
  assert ctx.sum() == 3 * 10 - 2
  loss_fn, denom = sft_loss_fn(cfg, chunk=100, context_weight=0.5)
  from ragjax.models.decoder import Decoder
  hidden, _ = Decoder(cfg).apply({"params": params}, batch.tokens, batch.positions,
                                 batch.attention_mask, return_hidden=True)
  lp, _ = full_logprobs(hidden[:, :-1], params["embed_tokens"]["embedding"].T, batch.tokens[:, 1:])
  lp = np.asarray(lp)
  pol = np.asarray(batch.loss_mask)[:, 1:]
  want_pol = -(lp * pol).sum() / pol.sum()
  want_ctx = -(lp * ctx[:, 1:]).sum() / ctx[:, 1:].sum()
  got, metrics = loss_fn(params, batch, denom(batch))
  assert float(metrics["nll"]) == pytest.approx(want_pol, rel=1e-5)
  assert float(metrics["context_nll"]) == pytest.approx(want_ctx, rel=1e-5)
  assert float(got) == pytest.approx(want_pol + 0.5 * want_ctx, rel=1e-5)


@registry.register("reward", "test_first_prompt_vowels")
def first_prompt_vowels(ctx):
  """The vowel share of the first prompt's rollouts, 0 on the others: their groups all score
  alike, so half the rows carry no advantage."""
  text = ctx.row.policy_text.lower()
  return sum(ch in "aeiou" for ch in text) / max(len(text), 1) if ctx.row.prompt_index == 0 \
      else 0.0


def test_a_step_that_skips_rows_without_advantage_trains_as_the_whole_batch(tmp_path):
  """rl.skip_zero_advantage_rows through the trainer: the same rollouts (same seed), the update
  of the 4 rows with an advantage instead of all 8, the same params after the step."""
  common = ["rl.rewards={'test_first_prompt_vowels': 1.0}", "rl.kl_coef=0.0",
            "rl.entropy_coef=0.0", "rl.mini_batch_size=0", "trainer.eval_every=0",
            "optim.warmup_steps=0", "optim.warmup_ratio=0.0"]   # the first step moves the params
  runs = {}
  for skip in (False, True):
    trainer = build_trainer(str(tmp_path / str(skip)), 1,
                            [*common, f"rl.skip_zero_advantage_rows={skip}"])
    start = jax.tree.map(np.array, jax.device_get(trainer.state.params))   # copies: donated
    (m,) = trainer.train()
    runs[skip] = (m, jax.device_get(trainer.state.params))
  whole, kept = runs[False][0], runs[True][0]
  assert whole["reward_std"] > 0 and whole["trajectories"] == 8
  assert kept["update/rows"] == 4 and kept["update/rows_skipped"] == 4
  assert "update/rows" not in whole
  for k in ("reward", "loss", "pg_loss", "grad_norm"):
    assert kept[k] == pytest.approx(whole[k], rel=1e-4, abs=1e-7), k
  moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
              for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(runs[True][1])))
  assert moved > 1e-4
  for a, b in zip(jax.tree.leaves(runs[False][1]), jax.tree.leaves(runs[True][1])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
