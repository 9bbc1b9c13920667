"""Running `python -m ragjax.train` in a subprocess from a recipe test, and reading its logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _xla_helpers import xla_flags
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def train_env(devices: int = 1) -> dict:
  """CPU, `devices` fake devices, this checkout (and tests/, for gin plug-ins) on the path
  (and the run's compilation cache, from conftest.py's environment)."""
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT,
              XLA_FLAGS=xla_flags(devices))


def train(args, devices: int = 1) -> subprocess.Popen:
  """`python -m ragjax.train ARGS` (the `--config=FILE:ARG` flag must come first)."""
  return preloaded.popen([sys.executable, "-m", "ragjax.train", *args], cwd=ROOT,
                         env=train_env(devices), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)


def finish(proc, timeout: int = 900):
  out, err = proc.communicate(timeout=timeout)
  assert proc.returncode == 0, err[-4000:]
  return out, err


def read_metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "rl", "metrics.jsonl")) as f:
    return [json.loads(l) for l in f if l.strip()]
