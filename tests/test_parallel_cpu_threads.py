"""`cpu_threads` and `cpu_isa`: a CPU process pinned to n cores and an instruction set computes
the bits of a process that only ever had n cores and that instruction set (real processes: one
pinned by `ragjax.parallel.cpu_threads.pin`, one started with a one-core affinity and
`--xla_cpu_max_isa` by its parent, and the two it is pinned against)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A column sum and a gradient (reductions XLA's CPU backend splits over its thread pool), and
# a one-layer decoder's logits (whose fused attention XLA compiles per instruction set).
PROBE = """
import hashlib, os, sys
from ragjax.parallel.cpu_threads import pin
if sys.argv[1] != "none":
  print("cores", pin(int(sys.argv[1]), sys.argv[2]))
import jax, jax.numpy as jnp, numpy as np
from ragjax.models.model_config import DecoderConfig
from ragjax.models.decoder import Decoder, init_params
x = jax.random.normal(jax.random.PRNGKey(0), (4096, 96))
w = jax.random.normal(jax.random.PRNGKey(1), (96, 512))
g = jax.jit(jax.grad(lambda w: jnp.tanh(x @ w).sum()))(w)
s = jax.jit(lambda x: x.sum(0))(x)
print("bits", hashlib.sha1(np.asarray(s).tobytes() + np.asarray(g).tobytes()).hexdigest())
cfg = DecoderConfig(vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=1,
                    num_heads=4, num_kv_heads=2, head_dim=32)
tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 32), 0, 2048)
params = init_params(cfg, jax.random.PRNGKey(3))
logits = jax.jit(lambda p: Decoder(cfg).apply({"params": p}, tokens)[0])(params)
print("logits", hashlib.sha1(np.asarray(logits).tobytes()).hexdigest())
"""


def _probe(*args, cores=None, isa=""):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  if isa:
    env["XLA_FLAGS"] = f"--xla_cpu_max_isa={isa}"
  pre = (lambda: os.sched_setaffinity(0, cores)) if cores else None
  out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=ROOT, text=True,
                       capture_output=True, timeout=120, preexec_fn=pre)
  assert out.returncode == 0, out.stderr[-2000:]
  return dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())


def _has_avx512() -> bool:
  try:
    with open("/proc/cpuinfo") as f:
      return " avx512f" in f.read()
  except OSError:
    return False


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_pinned_run_has_the_bits_of_a_one_core_avx2_machine():
  first = sorted(os.sched_getaffinity(0))[:1]
  machine = _probe("none", cores=first, isa="AVX2")     # a one-core AVX2 machine
  pinned = _probe("1", "AVX2")                          # this machine, pinned by the config fields
  assert pinned["cores"] == "1"
  assert pinned["bits"] == machine["bits"] and pinned["logits"] == machine["logits"]
  # the reasons for the fields (if one of these ever holds, XLA stopped depending on the
  # thread count or on the instruction set, and that field is no longer needed):
  every_core = _probe("none", isa="AVX2")
  assert every_core["bits"] != machine["bits"]           # all cores add in another order
  if _has_avx512():
    best_code = _probe("none", cores=first)              # this CPU's own (AVX-512) code
    assert best_code["logits"] != machine["logits"]


def test_an_unknown_instruction_set_is_refused_and_a_cap_already_set_wins(monkeypatch):
  from ragjax.parallel.cpu_threads import pin
  with pytest.raises(ValueError, match="cpu_isa='AVX9'"):
    pin(0, "AVX9")
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX")
  pin(0, "avx2")
  assert os.environ["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX"
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
  pin(0, "avx2")
  assert os.environ["XLA_FLAGS"] == ("--xla_force_host_platform_device_count=8 "
                                     "--xla_cpu_max_isa=AVX2")


def test_more_threads_than_cores_warns_and_uses_them_all():
  from ragjax.parallel.cpu_threads import pin
  have = len(os.sched_getaffinity(0))
  with pytest.warns(UserWarning, match="will differ"):
    assert pin(have + 1) == have
  assert pin(0) == have and len(os.sched_getaffinity(0)) == have
