"""A killed cold-start SFT resumes from its orbax checkpoint to the params and metrics log of an
uninterrupted run; a checkpoint from another cold-start config is refused naming the field."""

import jax
import numpy as np
import pytest

import ragjax.rl.sft as sft_module
from _rl_helpers import tiny_cfg, tiny_params
from ragjax.rl.checkpoint import ConfigMismatchError
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.sft import SFTConfig, run_sft
from ragjax.rollout.labels import Source


def traces(cfg, n=12):
  rng = np.random.default_rng(0)
  rows_t, rows_l = [], []
  for i in range(n):
    length = 10 + i % 5
    rows_t.append(rng.integers(1, cfg.vocab_size, length).astype(np.int32))
    labels = np.full(length, Source.POLICY, np.int32)
    labels[:4] = Source.PROMPT
    rows_l.append(labels)
  return rows_t, rows_l


class Killed(Exception):
  pass


def test_killed_sft_resumes_to_the_uninterrupted_params_and_log(tmp_path, monkeypatch):
  cfg = tiny_cfg()
  params = tiny_params         # a fresh copy per run: the update donates the params it is given
  rows_t, rows_l = traces(cfg)
  sft = SFTConfig(steps=7, batch_size=4, lr=1e-2, warmup_steps=2, log_every=1, save_every=2)
  kw = dict(seed=3, progress=False, fingerprint={"sft.lr": sft.lr})

  want, want_hist = run_sft(cfg, params(), rows_t, rows_l, sft, (16,),
                            log_path=str(tmp_path / "a.jsonl"), **kw)

  calls = {"n": 0}
  real = sft_module.make_sft_batch

  def dies_at_step_6(*a, **k):          # a kill after the step-4 checkpoint, mid step 6
    calls["n"] += 1
    if calls["n"] == 6:
      raise Killed()
    return real(*a, **k)

  monkeypatch.setattr(sft_module, "make_sft_batch", dies_at_step_6)
  log_b, ckpt = str(tmp_path / "b.jsonl"), str(tmp_path / "sft")
  with pytest.raises(Killed):
    run_sft(cfg, params(), rows_t, rows_l, sft, (16,), log_path=log_b, ckpt_dir=ckpt, **kw)
  assert [r["step"] for r in MetricsLog(log_b).read()] == [1, 2, 3, 4, 5]
  monkeypatch.setattr(sft_module, "make_sft_batch", real)

  got, got_hist = run_sft(cfg, params(), rows_t, rows_l, sft, (16,), log_path=log_b,
                          ckpt_dir=ckpt, **kw)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert [r["step"] for r in got_hist] == list(range(1, 8))
  assert MetricsLog(log_b).read() == MetricsLog(str(tmp_path / "a.jsonl")).read()
  assert got_hist == want_hist

  with pytest.raises(ConfigMismatchError, match=r"sft.lr: checkpoint=0.01 now=0.5.*delete"):
    run_sft(cfg, params(), rows_t, rows_l, sft, (16,), log_path=log_b, ckpt_dir=ckpt,
            seed=3, progress=False, fingerprint={"sft.lr": 0.5})


def test_sft_stops_on_non_finite_weights_and_they_are_never_exported(tmp_path):
  """Issue 28 #1: SFT with a huge lr stops with NonFiniteError (the params it would hand on are
  checked, not only the loss), and the HF export refuses non-finite weights."""
  from ragjax.models.hf_io import save_decoder
  from ragjax.rl.train_step import NonFiniteError
  cfg = tiny_cfg()
  rows_t, rows_l = traces(cfg)
  sft = SFTConfig(steps=3, batch_size=4, lr=1e39, warmup_steps=0, log_every=1)
  with pytest.raises(NonFiniteError, match=r"SFT step 1: non-finite .*lower sft.lr"):
    run_sft(cfg, tiny_params(), rows_t, rows_l, sft, (16,), seed=0, progress=False,
            log_path=str(tmp_path / "log.jsonl"))
  params = tiny_params()
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[0, 0].set(np.nan)
  with pytest.raises(ValueError, match="refusing to export non-finite weights"):
    save_decoder(str(tmp_path / "export"), cfg, params)
