"""The sampler against transformers: greedy tokens identical, log-probs equal a teacher-forced
forward, sampling settings behave as specified."""

import numpy as np
import pytest

from _sampling_helpers import hf_greedy, hf_model, ragjax_from_hf, teacher_forced_logprobs
from ragjax.sampling import EOS, BUDGET, Sampler, SamplerConfig

PROMPTS = [[5, 17, 33], [7, 8, 9, 10, 11, 12, 100, 200, 3], [42], [300, 301, 302, 303, 5, 6]]
NEW = 20


def _config(**kw):
  base = dict(max_cache_length=48, max_new_tokens=NEW, prompt_buckets=(16,), extend_buckets=(8,))
  base.update(kw)
  return SamplerConfig(**base)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request):
  m = hf_model(request.param)
  cfg, params = ragjax_from_hf(m)
  return m, cfg, params


@pytest.mark.parametrize("accelerator", [False, True])
def test_greedy_matches_transformers_generate(model, accelerator):
  """Also as accelerators run it: on the fused-projection copy of the weights (one qkv and one
  gate/up matmul per layer), prefill attention through jax.nn.dot_product_attention (its
  "xla" implementation here; "cudnn" on a GPU) and XLA's decode attention, against the same
  teacher-forced forward of the plain model."""
  m, cfg, params = model
  ref = hf_greedy(m, PROMPTS, NEW)
  run_cfg = cfg.replace(attention_impl="xla") if accelerator else cfg
  sampler = Sampler(run_cfg, params, None, _config(greedy=True, fused_projections=accelerator,
                                                   cpu_attention_kernel=not accelerator))
  assert sampler.fused is accelerator and sampler.params is params
  _, out = sampler.decode(sampler.prefill(PROMPTS))
  got = out.token_lists()
  reasons = np.asarray(out.stop_reason)
  for b, toks in enumerate(got):
    assert toks == ref[b, :len(toks)].tolist(), f"row {b}"
    if reasons[b] == EOS:                 # transformers pads after eos
      assert toks[-1] in cfg.eos_ids and (ref[b, len(toks):] == 0).all()
    else:
      assert reasons[b] == BUDGET and len(toks) == NEW
  # Log-probs equal a teacher-forced forward over prompt + generated tokens.
  lps = np.asarray(out.logprobs)
  tfs = teacher_forced_logprobs(cfg, params, [p + t for p, t in zip(PROMPTS, got)])
  for b, (toks, tf) in enumerate(zip(got, tfs)):
    n = len(PROMPTS[b])
    want = tf[np.arange(n - 1, n - 1 + len(toks)), toks]
    np.testing.assert_allclose(lps[b, :len(toks)], want, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def qwen():
  return ragjax_from_hf(hf_model("qwen2"))


def test_sampled_logprobs_match_teacher_forced_and_are_seeded(qwen):
  cfg, params = qwen
  temp = 0.7
  sampler = Sampler(cfg, params, None, _config(temperature=temp, eos_ids=()))
  state = sampler.prefill(PROMPTS[:2], samples_per_prompt=3, seed=7)
  _, out = sampler.decode(state)
  toks, lps = out.token_lists(), np.asarray(out.logprobs)
  np.testing.assert_array_equal(np.asarray(out.sampling_logprobs), lps)   # nothing truncated
  tfs = teacher_forced_logprobs(cfg, params, [PROMPTS[b // 3] + toks[b] for b in range(6)],
                                temperature=temp)
  for b, tf in enumerate(tfs):
    prompt = PROMPTS[b // 3]
    n = len(prompt)
    np.testing.assert_allclose(lps[b], tf[np.arange(n - 1, n - 1 + NEW), toks[b]], atol=1e-4)
  # The G samples of one prompt differ; the same seed repeats them, another seed does not.
  assert len({tuple(t) for t in toks[:3]}) == 3
  _, again = sampler.decode(sampler.prefill(PROMPTS[:2], samples_per_prompt=3, seed=7))
  assert again.token_lists() == toks
  _, other = sampler.decode(sampler.prefill(PROMPTS[:2], samples_per_prompt=3, seed=8))
  assert other.token_lists() != toks


@pytest.mark.parametrize("top_k,top_p,candidates", [(8, 0.6, 1024), (0, 0.6, 4), (0, 0.9, 2)])
def test_top_k_top_p_sample_inside_the_truncated_set(qwen, top_k, top_p, candidates):
  """Top-k then top-p, and top-p alone over the whole vocabulary with few nucleus candidates
  (rows whose nucleus they do not hold take the full sort)."""
  cfg, params = qwen
  temp = 1.3
  sampler = Sampler(cfg, params, None, _config(temperature=temp, top_k=top_k, top_p=top_p,
                                               eos_ids=(), max_new_tokens=8,
                                               nucleus_candidates=candidates))
  _, out = sampler.decode(sampler.prefill(PROMPTS, samples_per_prompt=2, seed=3))
  toks, slps = out.token_lists(), np.asarray(out.sampling_logprobs)
  tfs = teacher_forced_logprobs(cfg, params, [PROMPTS[b // 2] + toks[b] for b in range(8)],
                                temperature=temp)
  for b, tf in enumerate(tfs):
    prompt = PROMPTS[b // 2]
    for i, t in enumerate(toks[b]):
      lp = tf[len(prompt) - 1 + i].astype(np.float64)
      order = np.argsort(-lp, kind="stable")
      keep = order[:top_k] if top_k else order
      probs = np.exp(lp[keep] - np.logaddexp.reduce(lp[keep]))
      before = np.cumsum(probs) - probs
      # A token whose preceding mass is within float32 rounding of top_p may go either way.
      wants = []
      for eps in (-1e-5, 1e-5):
        kept = keep[before < top_p + eps]
        if t in kept:
          wants.append(lp[t] - np.logaddexp.reduce(lp[kept]))
      assert wants, f"row {b} step {i}: token {t} outside the top-k/top-p set"
      assert min(abs(w - slps[b, i]) for w in wants) < 1e-4, (b, i, wants, slps[b, i])


HEAD = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]
SHARED = [HEAD + [5, 17, 33], HEAD + [7, 8, 9, 10, 11, 12, 100, 200, 3], HEAD + [42],
          HEAD[:19] + [300, 301]]


def test_prompts_sharing_a_head_run_it_once_and_decode_as_transformers(model):
  """`shared_prefix`: the head every prompt starts with (19 tokens, cut to 16) runs once, the
  tails after it: the same next-token logits as one forward per prompt, the same greedy
  tokens (transformers' where no row stops on a near-tie with eos); G samples of each prompt
  keep their keys."""
  m, cfg, params = model
  plain = Sampler(cfg, params, None, _config(greedy=True, prompt_buckets=(32,)))
  shared = Sampler(cfg, params, None, _config(greedy=True, prompt_buckets=(32,),
                                              shared_prefix=8))
  lens = [len(p) for p in SHARED]
  tokens = np.zeros((4, 32), np.int32)
  for i, p in enumerate(SHARED):
    tokens[i, :len(p)] = p
  assert shared.shared_head(tokens, lens, 32) == (16, 16)      # 19 alike, tails <= 13 tokens
  assert plain.shared_head(tokens, lens, 32) == (0, 32)
  assert shared.shared_head(tokens[:1], lens[:1], 32) == (0, 32)   # one prompt: nothing shared
  a, b = plain.prefill(SHARED, samples_per_prompt=2), shared.prefill(SHARED, samples_per_prompt=2)
  np.testing.assert_allclose(np.asarray(b.logits), np.asarray(a.logits), atol=2e-4, rtol=0)
  np.testing.assert_array_equal(np.asarray(b.tokens), np.asarray(a.tokens))
  np.testing.assert_array_equal(np.asarray(b.lengths), np.asarray(a.lengths))
  np.testing.assert_array_equal(np.asarray(b.keys), np.asarray(a.keys))
  _, out = shared.decode(shared.prefill(SHARED))
  _, want = plain.decode(plain.prefill(SHARED))
  assert out.token_lists() == want.token_lists()
  ref = hf_greedy(m, SHARED, NEW)
  for r, toks in enumerate(out.token_lists()[:3]):
    assert toks == ref[r, :len(toks)].tolist(), f"row {r}"
  with pytest.raises(ValueError, match="shared_prefix"):
    _config(shared_prefix=-1)
