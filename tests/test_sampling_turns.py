"""Multi-turn behaviour: extend == re-prefill, clone/truncate, stop reasons, no recompiles,
and the sharded sampler == the unsharded one."""

import jax
import numpy as np
import pytest

from _sampling_helpers import hf_model, ragjax_from_hf, teacher_forced_logprobs
from ragjax.parallel.mesh import make_mesh
from ragjax.sampling import BUDGET, CACHE_FULL, EOS, NOT_RUN, PAUSED, Sampler, SamplerConfig

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13]]
OBS = {0: [20, 21, 22], 3: [30]}
SAMPLED = SamplerConfig(max_cache_length=64, max_new_tokens=6, prompt_buckets=(8, 16),
                        extend_buckets=(4, 8), temperature=0.8, eos_ids=())


@pytest.fixture(scope="module")
def model():
  return ragjax_from_hf(hf_model("llama", seed=1))


@pytest.fixture(scope="module")
def sampled(model):
  return Sampler(*model, None, SAMPLED)


def _two_turns(sampler, prompts=PROMPTS, obs=OBS, seed=1):
  state = sampler.prefill(prompts, samples_per_prompt=2, seed=seed)
  state, first = sampler.decode(state)
  state = sampler.extend(state, list(obs), list(obs.values()))
  state, second = sampler.decode(state)
  return state, first, second


def test_extend_then_continue_equals_reprefilling_the_history(sampled):
  state, first, second = _two_turns(sampled)
  n2 = np.asarray(second.lengths)
  histories = [state.history(r)[:len(state.history(r)) - n2[r]] for r in range(4)]
  for r in range(4):
    want = PROMPTS[r // 2] + first.token_lists()[r] + OBS.get(r, [])
    assert histories[r] == want
  ref_state = sampled.prefill(histories, samples_per_prompt=1, seed=1)
  _, ref = sampled.decode(ref_state)
  assert second.token_lists() == ref.token_lists()
  np.testing.assert_allclose(np.asarray(second.logprobs), np.asarray(ref.logprobs), atol=1e-4)
  np.testing.assert_array_equal(np.asarray(second.stop_reason), [BUDGET] * 4)


def test_compile_count_flat_across_turns_and_same_bucket_batches(sampled):
  compiles = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, *a, **k: compiles.append(event)
      if event == "/jax/core/compile/backend_compile_duration" else None)
  _two_turns(sampled)                                 # warm: every program once
  _two_turns(sampled, obs={r: [7] for r in range(4)})  # (an extend of every row: no cut-out)
  before = dict(sampled.trace_counts)
  n_compiles = len(compiles)
  for seed, prompts, obs in [(5, [[1, 2], [3, 4, 5, 6, 7, 8]], {1: [9, 9], 2: [7, 7, 7, 7]}),
                             (6, [[40] * 8, [41]], {0: [1], 1: [2], 2: [3], 3: [4]})]:
    state, _, _ = _two_turns(sampled, prompts, obs, seed)
    state, _ = sampled.decode(state)                  # a third turn without an extend
    jax.block_until_ready(state.tokens)
  assert dict(sampled.trace_counts) == before
  assert before["decode"] == 1 and before["extend"] == 1 and before["extend_rows"] == 1
  assert len(compiles) == n_compiles, compiles[n_compiles:]
  jax.jit(lambda x: x * 3 + 1)(np.arange(5))          # the listener does see a compile
  assert len(compiles) > n_compiles


def test_step_capped_decode_resumes_the_turn_under_its_budget(sampled):
  """A turn decoded 4 + 4 steps at a time equals it decoded whole (tokens, log-probs, the
  budget of 6 spanning both calls); a turn after an extend, 2 + 3 + 1, too."""
  def turns(chunks):
    state = sampled.prefill(PROMPTS, samples_per_prompt=2, seed=3)
    out = []
    for per_turn in chunks:
      toks, lps, reasons = [[] for _ in range(4)], [[] for _ in range(4)], []
      for steps in per_turn:
        state, o = sampled.decode(state, steps=steps)
        for r, t in enumerate(o.token_lists()):
          toks[r] += t
          lps[r] += np.asarray(o.logprobs)[r, :len(t)].tolist()
        reasons.append(np.asarray(o.stop_reason).tolist())
      out.append((toks, lps, reasons))
      state = sampled.extend(state, list(OBS), list(OBS.values()))
    return out
  whole = turns([[None], [None]])
  chunked = turns([[4, 4], [2, 3, 1]])
  for (toks, lps, _), (ctoks, clps, reasons) in zip(whole, chunked):
    assert ctoks == toks and all(len(t) == 6 for t in toks)
    np.testing.assert_allclose(np.asarray(clps), np.asarray(lps), atol=1e-5)
    assert reasons[0] == [PAUSED] * 4 and reasons[-1] == [BUDGET] * 4
  assert chunked[0][2] == [[PAUSED] * 4, [BUDGET] * 4]
  assert chunked[1][2] == [[PAUSED] * 4, [PAUSED] * 4, [BUDGET] * 4]
  with pytest.raises(ValueError, match="decode steps must be >= 1"):
    sampled.decode(sampled.prefill(PROMPTS), steps=0)


def test_extend_of_a_few_rows_runs_them_only_and_leaves_the_rest(model):
  """An extend of 2 rows of 8 runs on a cut-out of 2 rows: those rows then continue as after
  a re-prefill of their history, and every other row's state is bit-for-bit unchanged."""
  sampler = Sampler(*model, None, SAMPLED.replace(greedy=True))
  prompts = PROMPTS + [[14, 15], [16, 17, 18, 19]]
  state, _ = sampler.decode(sampler.prefill(prompts, samples_per_prompt=2, seed=1))
  before = jax.tree.map(np.asarray, state)
  obs = {2: [20, 21, 22], 7: [30, 31]}
  state = sampler.extend(state, list(obs), list(obs.values()))
  assert sampler.trace_counts["extend_rows"] == 1 and sampler.trace_counts["extend"] == 0
  after = jax.tree.map(np.asarray, state)
  others = [r for r in range(8) if r not in obs]
  for name in ("tokens", "lengths", "logits", "finished", "keys", "turn_tokens"):
    np.testing.assert_array_equal(getattr(after, name)[others], getattr(before, name)[others])
  for a, b in zip(after.cache["k"] + after.cache["v"], before.cache["k"] + before.cache["v"]):
    np.testing.assert_array_equal(a[others], b[others])
  histories = [state.history(r) for r in obs]
  assert [h[-len(o):] for h, o in zip(histories, obs.values())] == list(obs.values())
  _, out = sampler.decode(state)
  _, ref = sampler.decode(sampler.prefill(histories, seed=1))
  assert [out.token_lists()[r] for r in obs] == ref.token_lists()
  np.testing.assert_allclose(np.asarray(out.logprobs)[list(obs)], np.asarray(ref.logprobs),
                             atol=1e-4)


def _greedy_reference(cfg, params, history, steps):
  """Greedy continuation and its log-probs from full forwards (no cache)."""
  hist, toks, lps = list(history), [], []
  for _ in range(steps):
    lp = teacher_forced_logprobs(cfg, params, [hist])[0][-1]
    t = int(np.argmax(lp))
    toks.append(t), lps.append(lp[t]), hist.append(t)
  return toks, np.asarray(lps)


def test_stop_reasons_clone_truncate_and_set_done(model):
  cfg, params = model
  prompts = [[3, 4, 5], [60, 61, 62, 63, 64, 65, 66, 67], [8, 9]]
  refs = [_greedy_reference(cfg, params, p, 14)[0] for p in prompts]
  # An eos that row 0 reaches early and row 1 never produces before its cache fills.
  eos = next(t for t in refs[0][1:6] if t not in refs[1][:8] and t not in refs[2][:12])
  sampler = Sampler(cfg, params, None, SamplerConfig(
      max_cache_length=16, max_new_tokens=12, prompt_buckets=(8,), extend_buckets=(4,),
      greedy=True, eos_ids=(eos,)))
  state, out = sampler.decode(sampler.prefill(prompts))
  got, reasons = out.token_lists(), np.asarray(out.stop_reason)
  assert got[0] == refs[0][:refs[0].index(eos) + 1] and reasons[0] == EOS
  assert got[1] == refs[1][:8] and reasons[1] == CACHE_FULL
  assert got[2] == refs[2][:12] and reasons[2] == BUDGET
  # Row 0 becomes a copy of row 2 cut back to prompt + 3 tokens; row 1 is set done.
  state = sampler.clone_rows(state, [2], [0])
  state = sampler.truncate(state, [0], [len(prompts[2]) + 3])
  assert state.history(0) == prompts[2] + refs[2][:3]
  assert not np.array_equal(np.asarray(state.keys)[0], np.asarray(state.keys)[2])
  state = sampler.set_done(state, [1])
  state, out = sampler.decode(state)
  got, reasons = out.token_lists(), np.asarray(out.stop_reason)
  want, want_lp = _greedy_reference(cfg, params, prompts[2] + refs[2][:3], 11)
  assert got[0] == want and reasons[0] == CACHE_FULL           # 16 - 5 slots left
  np.testing.assert_allclose(np.asarray(out.logprobs)[0, :11], want_lp, atol=1e-4)
  assert got[1] == [] and reasons[1] == NOT_RUN
  assert got[2] == refs[2][12:14] and reasons[2] == CACHE_FULL
  with pytest.raises(ValueError, match="row 2 holds 16 tokens"):
    sampler.extend(state, [2], [[1]])
  with pytest.raises(ValueError, match="prompt 1 has 9 tokens"):
    sampler.prefill([[1], [2] * 9])


def test_sharded_sampler_matches_unsharded(model, sampled):
  mesh = make_mesh(data=2, fsdp=2, tensor=2)
  sharded = Sampler(*model, None, SAMPLED, mesh=mesh)
  state, first, second = _two_turns(sharded)
  _, ref_first, ref_second = _two_turns(sampled)
  assert first.token_lists() == ref_first.token_lists()
  assert second.token_lists() == ref_second.token_lists()
  np.testing.assert_allclose(np.asarray(second.logprobs), np.asarray(ref_second.logprobs),
                             atol=1e-4)
  leaf = state.cache["k"][0]                     # layer 0's [B, KVH, S, D] (per-layer layout)
  spec = leaf.sharding.spec
  assert leaf.ndim == 4 and spec[0] == ("data", "fsdp") and spec[1] == "tensor", spec


def test_sharded_top_p_sampler_matches_unsharded(model):
  """Top-p alone (the nucleus among 3 candidates, the full sort for rows it does not hold)
  under a mesh: the same tokens as unsharded."""
  conf = SAMPLED.replace(top_p=0.7, nucleus_candidates=3)
  mesh = make_mesh(data=2, fsdp=2, tensor=2)
  _, first, second = _two_turns(Sampler(*model, None, conf, mesh=mesh))
  _, ref_first, ref_second = _two_turns(Sampler(*model, None, conf))
  assert first.token_lists() == ref_first.token_lists()
  assert second.token_lists() == ref_second.token_lists()
  np.testing.assert_allclose(np.asarray(second.sampling_logprobs),
                             np.asarray(ref_second.sampling_logprobs), atol=1e-4)


def test_accelerator_path_sharded_matches_the_cpu_path(model, sampled):
  """As accelerators run it, under a mesh: the fused-projection weights (ragjax.models.fused)
  and prefill / extend attention through jax.nn.dot_product_attention ("xla" here): the same
  turns as the plain unsharded sampler; the fused kernels split their KV-head axis over
  `tensor`."""
  mesh = make_mesh(data=2, fsdp=2, tensor=2)
  cfg, params = model
  fused = Sampler(cfg.replace(attention_impl="xla"), params, None,
                  SAMPLED.replace(fused_projections=True), mesh=mesh)
  _, first, second = _two_turns(fused)
  _, ref_first, ref_second = _two_turns(sampled)
  assert first.token_lists() == ref_first.token_lists()
  assert second.token_lists() == ref_second.token_lists()
  np.testing.assert_allclose(np.asarray(second.logprobs), np.asarray(ref_second.logprobs),
                             atol=1e-4)
  layer = fused.run_params["layers_0"]
  assert "q_proj" not in layer["self_attn"] and "gate_proj" not in layer["mlp"]
  assert tuple(layer["self_attn"]["qkv_proj"]["kernel"].sharding.spec)[:2] == ("fsdp", "tensor")
  assert tuple(layer["mlp"]["gate_up_proj"]["kernel"].sharding.spec) == ("fsdp", None, "tensor")


def test_samplers_over_the_same_weights_share_one_fused_copy(model):
  """Two fused samplers over one params tree hold the same fused arrays (a server keeps
  several samplers; a trainer a rollout and an eval engine); new weights get a new copy."""
  cfg, params = model
  config = SAMPLED.replace(fused_projections=True)
  a, b = Sampler(cfg, params, None, config), Sampler(cfg, params, None, config.replace(
      max_new_tokens=3))
  qkv = lambda s: s.run_params["layers_1"]["self_attn"]["qkv_proj"]["kernel"]
  assert qkv(a) is qkv(b)
  assert a.run_params["embed_tokens"] is params["embed_tokens"]
  moved = jax.tree.map(lambda x: x * 1.0, params)
  b.set_params(moved)
  assert qkv(b) is not qkv(a) and b.params is moved
  np.testing.assert_array_equal(np.asarray(qkv(b)), np.asarray(qkv(a)))


def test_attention_windows_change_nothing_but_the_work(model):
  """Attending to the slots in use (rounded up to a window) equals attending to the whole
  cache: same tokens and log-probs over prefill, two decodes and an extend; the window grows
  with the rows and each window compiles once."""
  base = SamplerConfig(max_cache_length=128, max_new_tokens=6, prompt_buckets=(8, 16),
                       extend_buckets=(4, 8, 32), temperature=0.8, eos_ids=())
  assert base.attend_window(3) == 64 and base.attend_window(65) == 128   # default buckets
  windowed = Sampler(*model, None, base.replace(attend_buckets=(16, 24, 48)))
  full = Sampler(*model, None, base.replace(attend_buckets=()))
  obs = {0: [20, 21, 22], 1: list(range(30, 50)), 3: [30]}
  outs = [_two_turns(s, obs=obs) for s in (windowed, full)]
  for (_, *a), (_, *b) in [outs]:
    for x, y in zip(a, b):
      assert x.token_lists() == y.token_lists()
      np.testing.assert_allclose(np.asarray(x.logprobs), np.asarray(y.logprobs), atol=1e-5)
  # turn 1 ends at 5 + 6 = 11 -> window 16; after a 20-token observation row 1 needs 37 -> 48
  assert windowed.trace_counts["decode"] == 2 and windowed.trace_counts["extend"] == 1
  assert full.trace_counts["decode"] == 1
  state, _, _ = _two_turns(windowed, obs=obs, seed=3)
  assert windowed.trace_counts["decode"] == 2
  # The per-layer cache is only as wide as the window (grown 16 -> 48); the whole-cache
  # sampler's holds every slot from the prefill on.
  assert windowed.grow_cache and [x.shape[2] for x in state.cache["k"]] == [48] * 2
  assert windowed.trace_counts["grow"] == 1
  assert outs[1][0].cache["k"][0].shape[2] == 128
  # The stacked layout (scan_layers: allocated whole, windows sliced) decodes the same.
  cfg, params = model
  stacked = dict(params)
  layers = [stacked.pop(f"layers_{i}") for i in range(cfg.num_layers)]
  stacked["layers"] = {"layer": jax.tree.map(lambda *x: np.stack(x), *layers)}
  scan = Sampler(cfg.replace(scan_layers=True), stacked, None,
                 base.replace(attend_buckets=(16, 24, 48)))
  state, *got = _two_turns(scan, obs=obs)
  assert not scan.grow_cache and state.cache["k"].shape == (cfg.num_layers, 4, 128,
                                                             cfg.num_kv_heads, cfg.head_dim)
  for x, y in zip(got, outs[0][1:]):
    assert x.token_lists() == y.token_lists()
    np.testing.assert_allclose(np.asarray(x.logprobs), np.asarray(y.logprobs), atol=1e-5)
  # `unroll_layers`: the scanned model's weights unstacked, a per-layer cache grown through
  # the windows; the same tokens again, and `params` stay the caller's stacked tree.
  unrolled = Sampler(cfg.replace(scan_layers=True), stacked, None,
                     base.replace(attend_buckets=(16, 24, 48), unroll_layers=True))
  state, *got = _two_turns(unrolled, obs=obs)
  assert unrolled.grow_cache and [x.shape[2] for x in state.cache["k"]] == [48] * 2
  assert unrolled.params is stacked and unrolled.cfg.scan_layers
  np.testing.assert_array_equal(
      np.asarray(unrolled.run_params["layers_1"]["self_attn"]["q_proj"]["kernel"]),
      np.asarray(params["layers_1"]["self_attn"]["q_proj"]["kernel"]))
  for x, y in zip(got, outs[0][1:]):
    assert x.token_lists() == y.token_lists()
    np.testing.assert_allclose(np.asarray(x.logprobs), np.asarray(y.logprobs), atol=1e-5)


def test_temperature_ladder_samples_each_row_at_its_own_temperature(model):
  """R3-RAG's per-sample ladder: sample g of a prompt draws at temperatures[g]; the reported
  log-probs are under that row's temperature-scaled distribution, and a clone keeps it."""
  cfg = SAMPLED.replace(temperatures=(0.1, 1.7))
  sampler = Sampler(*model, None, cfg)
  state = sampler.prefill(PROMPTS, samples_per_prompt=2, seed=3)
  np.testing.assert_allclose(np.asarray(state.temperature), [0.1, 1.7, 0.1, 1.7])
  state, out = sampler.decode(state)
  for r, temp in enumerate([0.1, 1.7, 0.1, 1.7]):
    toks = out.token_lists()[r]
    hist = PROMPTS[r // 2] + toks
    ref = teacher_forced_logprobs(model[0], model[1], [hist], temperature=temp)[0]
    want = [ref[len(PROMPTS[r // 2]) - 1 + i, t] for i, t in enumerate(toks)]
    np.testing.assert_allclose(np.asarray(out.logprobs)[r, :len(toks)], want, atol=1e-4)
  state = sampler.clone_rows(state, [1], [2])
  assert float(np.asarray(state.temperature)[2]) == pytest.approx(1.7)
  with pytest.raises(ValueError, match="temperatures must all be > 0"):
    SAMPLED.replace(temperatures=(0.5, 0.0))
