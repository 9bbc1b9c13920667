"""`configs/rex_rag.py:tiny` end to end through `python -m ragjax.train`: the real engine (JAX
sampler, clone hook, BM25 over the synthetic world), cold-start SFT so the tiny policy answers,
and the real trainer with REX-RAG's filter, behaviour and metric.  Asserted from the run's
metrics log: clones are made, kept clones enlarge their group, the filter keeps
min(made, int(B x G x keep_ratio)) with keep_ratio the EWM of kept-probe accuracy, the update's
ratio is pi / mu (not pi / pi_old), and a run killed with SIGKILL after step 1 resumes to the
same params and metrics as the uninterrupted run."""

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from _rl_helpers import logged_metrics
import _preloaded as preloaded
from _xla_helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
STEPS, B, G, KEEP0 = 3, 4, 4, 0.125
# A dense user reward beside EM (the tiny policy is never right, so EM alone gives no
# gradient); every wrong answer cloned (p = 1) and an initial keep ratio that keeps 2 of 16.
ARGS = ["--config=configs/rex_rag.py:tiny", "--gin_file", os.path.join(TESTS, "dense_reward.gin"),
        "--config.rl.rewards={'em': 1.0, 'test_vowels': 1.0}", "--config.progress=False",
        "--config.rex_rag.p=1.0", f"--config.rex_rag.keep_ratio={KEEP0}",
        "--config.trainer.eval_every=0", f"--config.trainer.num_steps={STEPS}"]


def load_config(arg):
  import importlib.util
  spec = importlib.util.spec_from_file_location("rex_rag_config",
                                                os.path.join(ROOT, "configs", "rex_rag.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


@pytest.mark.parametrize("switch, field, want", [
    ("rex_rag.p=0.12", ("hook", "p"), 0.12),
    ("rex_rag.pool='five'", ("hook", "prompts"), 5),
    ("rex_rag.pool='five'", ("behaviour", "pool_name"), "five"),
    ("rex_rag.importance_sampling=False", ("behaviour", "importance_sampling"), False),
    ("rex_rag.ppd='coarse'", ("behaviour", "ppd"), "coarse"),
    ("rex_rag.trajectory_filter=False", ("filter", "enabled"), False),
    ("rex_rag.keep_ratio=0.12", ("filter", "keep_ratio"), 0.12)])
def test_each_ablation_is_one_switch(switch, field, want):
  """One field of the `rex_rag` section reaches every plug-in that reads it, on the command
  line (config_flags) and through `python -m ragjax.ablate` arms (apply_overrides)."""
  from ragjax.recipes.ablation import apply_overrides
  from ragjax.wiring.components import validate
  from ragjax.rollout.factory import make_hooks
  c = apply_overrides(load_config("tiny"), [switch])
  run, hook = validate(c), make_hooks(c)[0]
  where, key = field
  got = {"hook": lambda: len(hook.prompts) if key == "prompts" else getattr(hook, key),
         "behaviour": lambda: run.rl.behaviour_kwargs[key],
         "filter": lambda: run.rl.batch_filter_kwargs[key]}[where]()
  assert got == want


def test_config_arguments():
  dapo = load_config("dapo-3b")
  assert (dapo.rl.clip_low, dapo.rl.clip_high, dapo.rex_rag.keep_ratio) == (0.2, 0.28, 0.12)
  paper = load_config("qwen2.5-7b")
  assert paper.rl.mini_batch_size == 256 and paper.rl.group_size == 5
  assert paper.protocol.name == "rex_rag" and paper.protocol.max_turns == 5
  assert paper.rl.train_on == ("policy", "injected") and not paper.rl.use_sampler_logprobs
  world = load_config("world")
  assert world.recipe == "world" and world.rl.behaviour == "rex_rag"
  with pytest.raises(ValueError, match="unknown config argument"):
    load_config("qwen2.5-14b")


def _train(workdir):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT,
             XLA_FLAGS=xla_flags(1))
  return preloaded.popen([sys.executable, "-m", "ragjax.train", *ARGS,
                          f"--config.workdir={workdir}"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  full = str(tmp_path_factory.mktemp("full"))
  killed = str(tmp_path_factory.mktemp("killed")) + "/w"
  p_full = _train(full)
  # The killed run starts from the full run's world, index and cold start, which a run reuses
  # from its workdir under the same cold-start config ("cold start: reusing"): one SFT for both.
  from ragjax.recipes.world import COLD_START_DIR, COLD_START_META, SFT_DIR
  meta = os.path.join(full, COLD_START_DIR, COLD_START_META)
  deadline = time.time() + 900
  while not os.path.exists(meta):
    if p_full.poll() is not None or time.time() > deadline:
      pytest.fail(f"run exited before its cold start: {p_full.communicate()[0][-3000:]}")
    time.sleep(0.1)
  live = ("rl", "policy", SFT_DIR)            # written (or removed) by the running full run
  shutil.copytree(full, killed, ignore=lambda d, names: [n for n in names
                                                         if d == full and n in live])
  p_kill = _train(killed)
  step1 = os.path.join(killed, "rl", "latest", "1")
  while not os.path.isdir(step1):             # orbax renames the finished checkpoint to "1"
    if p_kill.poll() is not None or time.time() > deadline:
      pytest.fail(f"run exited before its step-1 checkpoint: {p_kill.communicate()[0][-3000:]}")
    time.sleep(0.1)
  os.kill(p_kill.pid, signal.SIGKILL)
  assert p_kill.wait() == -signal.SIGKILL
  assert not os.path.exists(os.path.join(killed, "policy"))
  out, _ = p_full.communicate(timeout=900)
  assert p_full.returncode == 0, out[-4000:]
  p_res = _train(killed)
  out, _ = p_res.communicate(timeout=900)
  assert p_res.returncode == 0, out[-4000:]
  assert "cold start: reusing" in out          # the cold start was the full run's
  return full, killed


def test_clones_enlarge_groups_and_the_filter_keeps_the_expected_count(runs):
  m = logged_metrics(runs[0])
  assert [r["step"] for r in m] == list(range(1, STEPS + 1))
  assert sum(r["rex_rag/clones_made"] for r in m) >= STEPS     # the probe policy ran
  keep_ratio = KEEP0
  for r in m:
    made, kept = r["rex_rag/clones_made"], r["rex_rag/clones_kept"]
    assert r["rex_rag/keep_ratio"] == pytest.approx(keep_ratio, rel=1e-12)
    assert kept == min(made, int(B * G * keep_ratio))
    assert r["trajectories_generated"] == B * G + made
    assert r["trajectories"] == B * G + kept
    assert r["rex_rag/overflow"] == 0 and r["rex_rag/eligible"] >= made
    assert r["rex_rag/a"] == pytest.approx(kept / (B * G + kept))
    assert r["rex_rag/z"] == pytest.approx(1 - r["rex_rag/acc_original"])
    if kept:                                  # a kept clone joins its prompt's group
      assert r["rex_rag/max_group"] > G
      keep_ratio = 0.9 * keep_ratio + 0.1 * r["rex_rag/acc_probe"]
    else:
      assert r["rex_rag/max_group"] == G
  assert any(r["rex_rag/clones_kept"] for r in m)
  assert any(r["rex_rag/clones_kept"] < r["rex_rag/clones_made"] for r in m)   # some dropped


def test_the_update_ratio_uses_mu(runs):
  """One mini-batch per step, so the update runs at theta = theta_old: its logged ratio is the
  token mean of pi_old / mu, which differs from 1 (pi_old / pi_old) once clones are kept."""
  for r in logged_metrics(runs[0]):
    assert r["ratio"] == pytest.approx(r["rex_rag/ratio_at_old"], rel=1e-4, abs=1e-5)
    assert r["rex_rag/mu_over_old/original"] == pytest.approx(1 - r["rex_rag/a"], rel=1e-5)
    if r["rex_rag/clones_kept"]:
      assert abs(r["ratio"] - 1) > 2e-4           # beyond the 1e-4 agreement checked above
      assert r["rex_rag/mu_over_old/continuation"] == pytest.approx(1.0, rel=1e-6)
      assert "rex_rag/mu_over_old/prompt" in r        # the inserted prompt is trained on


def test_kill_and_resume_gives_identical_params_and_metrics(runs):
  from safetensors.numpy import load_file
  full, killed = runs
  ma, mb = logged_metrics(full), logged_metrics(killed)
  assert [r["step"] for r in mb] == [r["step"] for r in ma]
  for x, y in zip(ma, mb):
    assert x.keys() == y.keys()
    for k in x:
      assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-7), (x["step"], k)
  a = load_file(os.path.join(full, "policy", "model.safetensors"))
  b = load_file(os.path.join(killed, "policy", "model.safetensors"))
  assert sorted(a) == sorted(b) and len(a) > 3
  worst = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
  assert worst <= 1e-6, f"resumed params differ by {worst}"
  assert ma[-1]["grad_norm"] > 0 and ma[-1]["kl"] > 0        # the run actually trained
