"""Exact resume across SIGKILL through the real engine, and refusal of a checkpoint written
under another config (naming each differing field; fields that do not change the run may
differ)."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from ragjax.rl.checkpoint import ConfigMismatchError
from _rl_helpers import logged_metrics
from _xla_helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 4


def _probe(workdir, *extra):
  env = dict(os.environ, XLA_FLAGS=xla_flags(1),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "resume_probe.py"),
                           "--workdir", workdir, "--steps", str(STEPS), *extra], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  full = str(tmp_path_factory.mktemp("full"))
  killed = str(tmp_path_factory.mktemp("killed"))
  p_full = _probe(full)
  p_kill = _probe(killed, "--pause_after", str(STEPS // 2))
  for line in p_kill.stdout:                      # wait for step N/2's checkpoint on disk
    if line.startswith(f"CHECKPOINTED {STEPS // 2}"):
      break
  else:
    pytest.fail(f"probe exited before checkpointing: rc={p_kill.wait()}")
  os.kill(p_kill.pid, signal.SIGKILL)
  assert p_kill.wait() == -signal.SIGKILL
  assert not os.path.exists(os.path.join(killed, "final.npz"))
  out, _ = p_full.communicate(timeout=600)
  assert p_full.returncode == 0, out[-3000:]
  p_res = _probe(killed)
  out, _ = p_res.communicate(timeout=600)
  assert p_res.returncode == 0, out[-3000:]
  return full, killed


def test_resume_after_sigkill_gives_identical_params_and_metrics(runs):
  full, killed = runs
  a, b = np.load(os.path.join(full, "final.npz")), np.load(os.path.join(killed, "final.npz"))
  assert sorted(a.files) == sorted(b.files) and len(a.files) > 5
  worst = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
  assert worst <= 1e-6, f"resumed params differ by {worst}"
  ma, mb = logged_metrics(full), logged_metrics(killed)
  assert [m["step"] for m in ma] == list(range(1, STEPS + 1)) == [m["step"] for m in mb]
  for x, y in zip(ma, mb):
    assert x.keys() == y.keys()
    for k in x:
      assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-7), (x["step"], k)
  assert ma[-1]["kl"] > 0 and ma[-1]["grad_norm"] > 0     # the run actually trained


def test_checkpoint_from_other_config_is_refused(runs):
  from resume_probe import build_trainer
  _, killed = runs
  trainer = build_trainer(killed, STEPS + 2, ["rl.kl_coef=0.02", "rl.clip_high=0.28"])
  with pytest.raises(ConfigMismatchError) as e:
    trainer.maybe_resume()
  msg = str(e.value)
  assert "rl.kl_coef: checkpoint=0.01 now=0.02" in msg and "rl.clip_high" in msg
  assert "rl.group_size" not in msg and len(msg) < 600
  with pytest.raises(ConfigMismatchError, match=r"mismatched field\(s\): optim.lr: "
                                                r"checkpoint=0.003 now=0.001$"):
    build_trainer(killed, STEPS + 2, ["optim.lr=1e-3"]).maybe_resume()
  # fields that do not change the trajectory (num_steps, eval and save cadence) may differ
  ok = build_trainer(killed, STEPS + 2, ["trainer.eval_every=3", "trainer.save_every=2"])
  assert ok.maybe_resume() == STEPS


def test_check_resume_reads_only_the_checkpoint_fingerprint(tmp_path):
  """What recipes call before any set-up: None without a checkpoint, the step under the same
  config, and the trainer's refusal (each differing field named) under another."""
  import jax.numpy as jnp
  from ragjax.rl.checkpoint import Checkpointer, check_resume
  d = str(tmp_path / "rl")
  assert check_resume(d, {"optim.lr": 1e-3}) is None and not os.path.exists(d)
  ckpt = Checkpointer(d, {"optim.lr": 1e-3, "rl.kl_coef": 0.01})
  ckpt.save(3, {"w": jnp.ones(2)}, {"rng": [0, 1]})
  ckpt.wait()
  ckpt.close()
  assert check_resume(d, {"optim.lr": 1e-3, "rl.kl_coef": 0.01}) == 3
  with pytest.raises(ConfigMismatchError, match=r"latest/3 .*mismatched field\(s\): optim.lr: "
                                                r"checkpoint=0.001 now=0.5$"):
    check_resume(d, {"optim.lr": 0.5, "rl.kl_coef": 0.01})


def test_a_field_made_resume_mutable_later_does_not_refuse_old_checkpoints(tmp_path):
  """A checkpoint whose fingerprint holds `trainer.keep_best` (written before that field was
  resume-mutable) resumes whatever the field says now, or without it."""
  import jax.numpy as jnp
  from ragjax.rl.checkpoint import Checkpointer, check_resume
  d = str(tmp_path / "rl")
  ckpt = Checkpointer(d, {"optim.lr": 1e-3, "trainer.keep_best": True})
  ckpt.save(2, {"w": jnp.ones(2)}, {})
  ckpt.wait()
  ckpt.close()
  assert check_resume(d, {"optim.lr": 1e-3}) == 2
  assert check_resume(d, {"optim.lr": 1e-3, "trainer.keep_best": False}) == 2
