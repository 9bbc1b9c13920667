"""`cpu_threads`: a CPU process pinned to n cores computes the bits of a process that only ever
had n cores (real processes: one pinned by `ragjax.parallel.cpu_threads.pin`, one started with
a one-core affinity by its parent, one free on every core)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A column sum and a gradient: reductions XLA's CPU backend splits over its thread pool.
PROBE = """
import hashlib, os, sys
from ragjax.parallel.cpu_threads import pin
if sys.argv[1] != "none":
  print("cores", pin(int(sys.argv[1])))
import jax, jax.numpy as jnp, numpy as np
x = jax.random.normal(jax.random.PRNGKey(0), (4096, 96))
w = jax.random.normal(jax.random.PRNGKey(1), (96, 512))
g = jax.jit(jax.grad(lambda w: jnp.tanh(x @ w).sum()))(w)
s = jax.jit(lambda x: x.sum(0))(x)
print("bits", hashlib.sha1(np.asarray(s).tobytes() + np.asarray(g).tobytes()).hexdigest())
"""


def _probe(arg, cores=None):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  pre = (lambda: os.sched_setaffinity(0, cores)) if cores else None
  out = subprocess.run([sys.executable, "-c", PROBE, arg], env=env, cwd=ROOT, text=True,
                       capture_output=True, timeout=120, preexec_fn=pre)
  assert out.returncode == 0, out.stderr[-2000:]
  return dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_pinned_run_has_the_bits_of_a_one_core_machine():
  first = sorted(os.sched_getaffinity(0))[:1]
  one_core = _probe("none", cores=first)           # a machine with one core
  pinned = _probe("1")                             # this machine, pinned by the config field
  free = _probe("none")                            # this machine, every core
  assert pinned["cores"] == "1"
  assert pinned["bits"] == one_core["bits"]
  # the reason for the field: all cores add in another order (if this ever holds, XLA's CPU
  # reductions stopped depending on the thread count and the field is no longer needed)
  assert free["bits"] != one_core["bits"]


def test_more_threads_than_cores_warns_and_uses_them_all():
  from ragjax.parallel.cpu_threads import pin
  have = len(os.sched_getaffinity(0))
  with pytest.warns(UserWarning, match="will differ"):
    assert pin(have + 1) == have
  assert pin(0) == have and len(os.sched_getaffinity(0)) == have
