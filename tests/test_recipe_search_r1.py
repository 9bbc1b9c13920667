"""`configs/search_r1.py:tiny` (and `:tiny-ppo`) end to end through `python -m ragjax.train`:
the real engine, sampler, BM25 index and trainer on the synthetic world; the same losses
sharded (`--config.mesh.fsdp=2` over 8 fake devices) as unsharded; resume with a changed step
count, refusal of a changed learning rate naming the field (before any set-up); `python -m
ragjax.evaluate` on the exported policy."""

import os
import sys

import pytest

import _preloaded as preloaded
from _recipe_helpers import (ROOT, TESTS, finish as _finish, read_metrics as _metrics, train,
                             train_env)

# A dense user reward bound with gin next to the paper's EM (a random tiny policy never
# answers right, so EM alone gives zero gradients and nothing to compare).
TINY = ["--gin_file", os.path.join(TESTS, "dense_reward.gin"),
        "--config.rl.rewards={'search_r1_em': 1.0, 'test_vowels': 1.0}",
        "--config.progress=False", "--config.trainer.eval_every=2",
        "--config.trainer.eval_prompts=4", "--config.trainer.save_every=1"]


def _train(workdir, *args, devices=1, config="configs/search_r1.py:tiny", check=True):
  return train([f"--config={config}", f"--config.workdir={workdir}", *TINY, *args], devices)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  plain = str(tmp_path_factory.mktemp("plain"))
  sharded = str(tmp_path_factory.mktemp("sharded"))
  procs = [_train(plain, "--config.trainer.num_steps=2"),
           _train(sharded, "--config.trainer.num_steps=2", "--config.mesh.fsdp=2", devices=8)]
  for p in procs:
    _finish(p)
  return plain, sharded


def test_tiny_trains_end_to_end_and_exports_the_policy(runs):
  plain, _ = runs
  m = _metrics(plain)
  assert [r["step"] for r in m] == [1, 2] and "dev/em" in m[1]
  assert m[0]["trajectories"] == 20                # 4 prompts x 5 samples
  assert m[0]["reward/test_vowels"] > 0 and m[0]["grad_norm"] > 0
  assert m[1]["kl"] > 0                            # the policy moved off the reference
  assert os.path.exists(os.path.join(plain, "policy", "model.safetensors"))
  assert os.path.exists(os.path.join(plain, "policy", "tokenizer.json"))


def test_fsdp_mesh_gives_the_same_losses_as_one_device(runs):
  plain, sharded = runs
  a, b = _metrics(plain), _metrics(sharded)
  for x, y in zip(a, b):
    for key in ("loss", "pg_loss", "kl", "grad_norm", "reward", "response_length", "entropy"):
      assert y[key] == pytest.approx(x[key], rel=2e-4, abs=1e-6), (x["step"], key)


def test_resume_with_more_steps_and_refuse_a_changed_learning_rate(runs, tmp_path):
  plain, _ = runs
  work = str(tmp_path / "resumed")
  import shutil
  shutil.copytree(plain, work)
  out, err = _finish(_train(work, "--config.trainer.num_steps=3"))
  assert [r["step"] for r in _metrics(work)] == [1, 2, 3]
  bad = _train(work, "--config.trainer.num_steps=4", "--config.optim.lr=0.5")
  bad_out, err = bad.communicate(timeout=600)
  assert bad.returncode == 2, err[-3000:]
  assert "optim.lr: checkpoint=0.001 now=0.5" in err and "Traceback" not in err
  assert len(err.strip().splitlines()[-1]) < 400
  assert "data:" not in bad_out, bad_out[-2000:]       # refused before any set-up work


def test_tiny_ppo_trains_a_critic(tmp_path):
  """With the paper configs' verl critic: every response token valued, whitened over and
  regressed on, the value head drawn N(0, 0.02^2)."""
  work = str(tmp_path / "ppo")
  _finish(_train(work, "--config.trainer.num_steps=1", "--config.rl.critic_mask=response",
                 "--config.rl.adv_whiten=verl", "--config.rl.adv_whiten_mask=response",
                 "--config.rl.value_head_init=verl", config="configs/search_r1.py:tiny-ppo"))
  m = _metrics(work)
  assert m[0]["trajectories"] == 4 and m[0]["critic/value_loss"] > 0


def test_evaluate_takes_the_same_config(runs):
  plain, _ = runs
  proc = preloaded.run([sys.executable, "-m", "ragjax.evaluate",
                         "--config=configs/search_r1.py:tiny", f"--config.workdir={plain}",
                         f"--checkpoint={os.path.join(plain, 'policy')}", "--limit=4"],
                       cwd=ROOT, env=train_env(1), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [l for l in proc.stdout.splitlines() if l.startswith("| test |")]
  assert [r.split(" | ")[1] for r in rows] == ["policy + retrieval", "policy, no retrieval"]
