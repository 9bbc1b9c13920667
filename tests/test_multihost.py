"""Multi-host training with real JAX processes on 127.0.0.1 (`jax.distributed`, gloo on CPU):
`configs/search_r1.py:tiny` on 4 processes x 1 device gives the losses of 1 process x 4 devices
on the same global batch (4 prompts: one GRPO group per process); a checkpoint written by 4
processes resumes in 1, and one written by 1 resumes in 2 processes x 2 devices with the step-3
losses of that 1-process resume; a process that dies (process 1 of the 2-process resume, after
its step 3) fails the job within a bounded time, not a hang."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

import _preloaded as preloaded
from _xla_helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
ARGS = ["--gin_file", os.path.join(TESTS, "dense_reward.gin"),
        "--config.rl.rewards={'search_r1_em': 1.0, 'test_vowels': 1.0}",
        "--config.progress=False", "--config.trainer.eval_every=0",
        "--config.trainer.save_every=1", "--config.trainer.batch_prompts=4",
        "--config.rl.mini_batch_size=0", "--config.rl.micro_batch_size=0"]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def launch(workdir, steps, processes, devices, log_dir):
  """`processes` JAX processes with `devices` CPU devices each, running the train command."""
  port = free_port()
  procs = []
  for i in range(processes):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT,
               XLA_FLAGS=xla_flags(devices),
               RAGJAX_HEARTBEAT_S="10", RAGJAX_SHUTDOWN_TIMEOUT_S="10")
    if processes > 1:
      env.update(RAGJAX_COORDINATOR=f"127.0.0.1:{port}", RAGJAX_NUM_PROCESSES=str(processes),
                 RAGJAX_PROCESS_ID=str(i))
    cmd = [sys.executable, "-m", "ragjax.train", "--config=configs/search_r1.py:tiny",
           f"--config.workdir={workdir}", f"--config.trainer.num_steps={steps}", *ARGS]
    log = open(os.path.join(log_dir, f"p{processes}_{i}.log"), "w")
    procs.append(preloaded.popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
  return procs


def finish(procs, log_dir, timeout=900):
  for i, p in enumerate(procs):
    rc = p.wait(timeout=timeout)
    if rc != 0:
      logs = "\n".join(open(os.path.join(log_dir, f)).read()[-3000:] for f in os.listdir(log_dir))
      pytest.fail(f"process {i} exited {rc}:\n{logs}")


def metrics(workdir):
  with open(os.path.join(workdir, "rl", "metrics.jsonl")) as f:
    return [json.loads(l) for l in f if l.strip()]


def logged_step(workdir, step) -> bool:
  """True once `step`'s metrics line is complete in the (live) run's log."""
  try:
    return any(r["step"] == step for r in metrics(workdir))
  except (OSError, ValueError):          # not written yet, or a line half-written
    return False


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  logs = str(tmp_path_factory.mktemp("logs"))
  one = str(tmp_path_factory.mktemp("one_process"))
  four = str(tmp_path_factory.mktemp("four_processes"))
  finish(launch(one, 2, 1, 4, logs) + launch(four, 2, 4, 1, logs), logs)
  return one, four, logs


def test_several_processes_give_the_one_process_losses(runs):
  one, other, _ = runs
  a, b = metrics(one), metrics(other)
  assert [r["step"] for r in a] == [1, 2] == [r["step"] for r in b]
  for x, y in zip(a, b):
    assert x["trajectories"] == y["trajectories"] == 20
    for key in ("loss", "kl", "grad_norm", "reward", "response_length", "entropy"):
      assert y[key] == pytest.approx(x[key], rel=2e-4, abs=1e-6), (x["step"], key)
  assert a[1]["grad_norm"] > 0
  assert os.path.exists(os.path.join(other, "policy", "model.safetensors"))


@pytest.fixture(scope="module")
def resumed(runs, tmp_path_factory):
  """The 4-process checkpoint resumed in 1 process for a third step, and the 1-process one in
  2 processes x 2 devices, whose process 1 is killed once step 3 is logged (the dead-process
  test): one startup of each layout serves both tests."""
  one, four, logs = runs
  a = str(tmp_path_factory.mktemp("resumed") / "from_four")
  b = str(tmp_path_factory.mktemp("resumed") / "from_one")
  shutil.copytree(four, a)
  shutil.copytree(one, b)
  procs_a = launch(a, 3, 1, 4, logs)
  procs_b = launch(b, 50, 2, 2, logs)
  try:
    deadline = time.time() + 900
    while not logged_step(b, 3):
      assert time.time() < deadline and all(p.poll() is None for p in procs_b), \
          "the 2-process resume did not reach step 3"
      time.sleep(1)
    os.kill(procs_b[1].pid, signal.SIGKILL)
    t0 = time.time()
    rc = procs_b[0].wait(timeout=180)
    elapsed = time.time() - t0
  finally:
    for p in procs_b:
      if p.poll() is None:
        p.kill()
  finish(procs_a, logs)
  return dict(from_four=a, from_one=b, rc=rc, elapsed=elapsed)


def test_checkpoints_move_between_process_counts(resumed):
  ma, mb = metrics(resumed["from_four"]), metrics(resumed["from_one"])
  assert [r["step"] for r in ma] == [1, 2, 3] == [r["step"] for r in mb][:3]
  assert mb[2]["loss"] == pytest.approx(ma[2]["loss"], rel=2e-4, abs=1e-6)


def test_a_dead_process_fails_the_job_in_bounded_time(resumed):
  assert resumed["rc"] != 0 and resumed["elapsed"] < 180
