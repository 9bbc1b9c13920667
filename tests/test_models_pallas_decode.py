"""The Pallas decode attention (ragjax.models.pallas_decode; Triton on GPUs) in Pallas'
interpret mode on CPU: the same logits as XLA's attention over each row's own length, split
or not, and the same turns when the sampler decodes with it."""

import jax
import jax.numpy as jnp
import numpy as np

from _hlo_helpers import Program
from _model_helpers import random_params
from _sampling_helpers import hf_model, ragjax_from_hf
from ragjax.models.kv_cache import init_cache
from ragjax.models.pallas_decode import splits, supported
from ragjax.models.presets import get_preset
from ragjax.sampling import Sampler, SamplerConfig
from ragjax.sampling.forward import forward_into_cache


def test_decode_step_equals_xla_attention_per_row_length():
  """Rows at different lengths (one inactive, writing past the end); a 64-slot window in one
  part and a 512-slot window split in two."""
  cfg = get_preset("tiny")
  params = random_params(cfg)
  rng = np.random.default_rng(0)
  assert [supported(s) for s in (48, 64, 96, 512)] == [False, True, False, True]
  assert (splits(64), splits(512)) == (1, 2)
  for slots, starts in ((64, [3, 40, 63, 64]), (512, [5, 300, 511, 512])):
    cache = init_cache(cfg, 4, slots)
    cache = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), cache)
    tok = jnp.asarray(rng.integers(1, cfg.vocab_size, (4, 1)), jnp.int32)
    step = lambda pallas: jax.jit(lambda c: forward_into_cache(
        cfg, params, c, tok, jnp.asarray(starts, jnp.int32), jnp.zeros((4,), jnp.int32),
        pallas_decode=pallas))(cache)
    (ref_cache, ref), (got_cache, got) = step(False), step(True)
    np.testing.assert_allclose(np.asarray(got)[:3], np.asarray(ref)[:3], atol=1e-5)
    for a, b in zip(jax.tree.leaves(got_cache), jax.tree.leaves(ref_cache)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_sampler_with_the_pallas_kernel_samples_what_xla_attention_samples():
  cfg, params = ragjax_from_hf(hf_model("llama", seed=1))
  base = SamplerConfig(max_cache_length=128, max_new_tokens=8, prompt_buckets=(8, 16),
                       extend_buckets=(4, 32), temperature=0.8, eos_ids=(),
                       cpu_attention_kernel=False)
  outs, loops = [], []
  for mode in ("xla", "pallas"):
    sampler = Sampler(cfg, params, None, base.replace(decode_attention=mode))
    state = sampler.prefill([[5, 6, 7], [9, 10, 11, 12, 13]], samples_per_prompt=2, seed=4)
    loops.append(len(Program.of(sampler.lower_decode(state)).while_bodies()))
    state, first = sampler.decode(state)
    state = sampler.extend(state, [0, 1, 3], [[20, 21, 22], list(range(30, 50)), [30]])
    state, second = sampler.decode(state)
    outs.append((first, second))
  assert loops[1] > loops[0]          # interpret mode runs the kernel's grid as HLO loops
  for a, b in zip(*outs):
    assert a.token_lists() == b.token_lists()
    np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=1e-4)
