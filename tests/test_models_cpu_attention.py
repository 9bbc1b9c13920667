"""The CPU attention kernel (`ragjax.models.cpu_attention`) against XLA's attention: the op on
its own, one decoder forward into the cache, and whole multi-turn sampling."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _sampling_helpers import hf_model, ragjax_from_hf
from ragjax.models import cpu_attention
from ragjax.models.decoder import init_params
from ragjax.models.kv_cache import init_cache
from ragjax.models.presets import get_preset
from ragjax.sampling import Sampler, SamplerConfig
from ragjax.sampling.forward import forward_into_cache

pytestmark = pytest.mark.skipif(not cpu_attention.available(),
                                reason="no C++ compiler here: the kernel cannot be built")


def reference(q, k, v, limits, window):
  """Softmax attention written out: query (g, t) of row b sees slots <= limits[b, t] of the
  first `window`; a limit at or past the window sees nothing (zeros)."""
  b, h, m, d = q.shape
  t = limits.shape[1]
  k, v = k[:, :, :window], v[:, :, :window]
  scores = np.einsum("bhmd,bhsd->bhms", q, k) / np.sqrt(d)
  lim = np.tile(limits, (1, m // t))                                    # [B, M], m = g*T + t
  seen = np.arange(window)[None, None, :] <= lim[:, :, None]
  seen &= (lim < window)[:, :, None]
  scores = np.where(seen[:, None], scores, -np.inf)
  mx = np.max(np.where(seen[:, None], scores, -1e30), axis=-1, keepdims=True)
  w = np.where(seen[:, None], np.exp(scores - mx), 0.0)
  norm = w.sum(-1, keepdims=True)
  return np.einsum("bhms,bhsd->bhmd", w, v) / np.where(norm > 0, norm, 1.0)


@pytest.mark.parametrize("b,h,g,t,d,s,window", [
    (3, 2, 4, 1, 64, 96, 96),      # a decode step, AVX path (d % 8 == 0), several key blocks
    (2, 1, 1, 1, 64, 19, 19),      # a window that is not a multiple of the key block
    (3, 2, 7, 1, 128, 40, 40),     # Qwen2.5's head dim (128) and 7 query heads per KV head
    (3, 2, 4, 9, 64, 50, 47),      # an extend whose rows reach the window (47: no whole tile)
    (2, 2, 2, 7, 16, 40, 33),      # an extend of 7 tokens, window narrower than the array
    (2, 2, 3, 5, 12, 30, 30),      # head dim 12: the generic (non-AVX) loops
    (2, 2, 8, 40, 64, 300, 256),   # enough work to run on the thread pool
])
def test_kernel_equals_softmax_attention(b, h, g, t, d, s, window):
  rng = np.random.default_rng(b * 100 + t)
  q = rng.standard_normal((b, h, g * t, d)).astype(np.float32)
  k = rng.standard_normal((b, h, s, d)).astype(np.float32)
  v = rng.standard_normal((b, h, s, d)).astype(np.float32)
  starts = rng.integers(0, window - t, size=(b, 1))
  limits = (starts + np.arange(t)[None]).astype(np.int32)
  limits[-1] = window + 3                   # a row that writes nothing this call: zeros
  if b > 1:
    limits[0, 0] = 0                        # a query that sees one slot only
  if b > 2:
    limits[1] = window - t + np.arange(t)   # a row whose last token is the window's last slot
  got = np.asarray(jax.jit(lambda *a: cpu_attention.cached_attention(*a, window=window))(
      q, k, v, limits))
  want = reference(q, k, v, limits, window)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
  assert np.all(got[-1] == 0)


def test_kernel_rejects_mismatched_shapes():
  q = jnp.zeros((2, 2, 4, 64))
  k = jnp.zeros((2, 2, 16, 64))
  with pytest.raises(Exception, match="shapes do not agree"):
    jax.block_until_ready(cpu_attention.cached_attention(q, k, k[:, :, :8], jnp.zeros((2, 1), jnp.int32),
                                                         window=16))


def test_decoder_forward_into_cache_agrees_with_xla_attention():
  """A prefill, an extend and a decode step through the real decoder, per-layer cache: the
  kernel's logits and cache equal XLA's attention's."""
  cfg = get_preset("tiny").replace(dtype="float32")
  params = init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  runs = {}
  for kernel in (False, True):
    cache = init_cache(cfg, 3, 64, "float32")
    outs = []
    for tokens, starts, window in [
        (rng.integers(1, cfg.vocab_size, (3, 12)), np.zeros(3), 16),
        (rng.integers(1, cfg.vocab_size, (3, 9)), np.array([12, 10, 64]), 32),  # row 2: none
        (rng.integers(1, cfg.vocab_size, (3, 1)), np.array([21, 19, 7]), 32)]:
      cache, logits = forward_into_cache(cfg, params, cache, jnp.asarray(tokens, jnp.int32),
                                         jnp.asarray(starts, jnp.int32),
                                         jnp.full((3,), tokens.shape[1] - 1, jnp.int32),
                                         window=window, cpu_kernel=kernel)
      outs.append(np.asarray(logits))
    runs[kernel] = outs, cache
    rng = np.random.default_rng(0)
  (xla, xla_cache), (kern, kern_cache) = runs[False], runs[True]
  for call, (a, b) in enumerate(zip(xla, kern)):
    rows = [0, 1] if call == 1 else [0, 1, 2]     # the extend's row 2 wrote nothing
    np.testing.assert_allclose(a[rows], b[rows], atol=1e-5)
  for name in ("k", "v"):
    for a, b in zip(xla_cache[name], kern_cache[name]):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_sampler_with_the_kernel_samples_what_xla_attention_samples():
  """Multi-turn sampling (prefill, decode, extend of some rows, decode) on a model with
  transformers' layout: same tokens, log-probs within float32 noise."""
  cfg, params = ragjax_from_hf(hf_model("llama", seed=1))
  base = SamplerConfig(max_cache_length=128, max_new_tokens=8, prompt_buckets=(8, 16),
                       extend_buckets=(4, 8, 32), temperature=0.8, eos_ids=())
  outs = []
  for kernel in (True, False):
    sampler = Sampler(cfg, params, None, base.replace(cpu_attention_kernel=kernel))
    assert sampler.cpu_kernel is kernel
    state = sampler.prefill([[5, 6, 7], [9, 10, 11, 12, 13]], samples_per_prompt=2, seed=4)
    state, first = sampler.decode(state)
    state = sampler.extend(state, [0, 1, 3], [[20, 21, 22], list(range(30, 50)), [30]])
    state, second = sampler.decode(state)
    outs.append((first, second))
  for x, y in zip(*outs):
    assert x.token_lists() == y.token_lists()
    np.testing.assert_allclose(np.asarray(x.logprobs), np.asarray(y.logprobs), atol=1e-5)


def test_switched_off_or_unbuildable_falls_back_with_a_clear_reason(tmp_path):
  """RAGJAX_CPU_ATTENTION=0 turns the kernel off; a compiler that fails is reported (one
  warning naming the command) and the sampler keeps XLA's attention."""
  code = ("import logging; logging.basicConfig();"
          "from ragjax.models import cpu_attention; print(cpu_attention.available())")
  env = dict(os.environ, RAGJAX_CPU_ATTENTION="0")
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.stdout.strip() == "False"
  env = dict(os.environ, CXX="false", RAGJAX_KERNEL_CACHE=str(tmp_path))
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert out.stdout.strip() == "False"
  assert "CPU attention kernel unavailable" in out.stderr and "failed" in out.stderr
  with pytest.raises(RuntimeError, match="failed"):
    os.environ["CXX"] = "false"
    try:
      cpu_attention.build(tmp_path / "x.so")
    finally:
      del os.environ["CXX"]
