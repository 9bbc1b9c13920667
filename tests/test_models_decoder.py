"""Decoder logits against transformers' PyTorch models on the same random weights."""

import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.models.decoder import Decoder, init_cache
from ragjax.models.hf_io import load_decoder
from ragjax.models.presets import get_preset
from tests._model_helpers import (KINDS, padded_batch, random_params, save_hf_decoder,
                                  torch_logits)

LENGTHS = (11, 7, 3)


@pytest.fixture(scope="module", params=sorted(KINDS))
def checkpoint(request, tmp_path_factory):
  path = str(tmp_path_factory.mktemp(request.param))
  model = save_hf_decoder(request.param, path)
  return request.param, path, model


@pytest.mark.parametrize("scan_layers", [False, True])
def test_logits_match_transformers_on_padded_batch(checkpoint, scan_layers):
  kind, path, model = checkpoint
  cfg, params = load_decoder(path, scan_layers=scan_layers)
  tokens, mask = padded_batch(cfg.vocab_size, LENGTHS)
  ref = torch_logits(model, tokens, mask)
  out, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                              attention_mask=jnp.asarray(mask))
  diff = np.abs(np.asarray(out) - ref)[mask.astype(bool)]
  assert diff.max() <= 1e-4, f"{kind}: max |dlogit| {diff.max()}"
  if kind == "llama_scaled":
    assert cfg.rope_scaling is not None and cfg.num_kv_heads < cfg.num_heads
  if kind == "qwen2_tied":
    assert cfg.qkv_bias and cfg.tie_word_embeddings and "lm_head" not in params


def test_fused_projections_give_transformers_logits(checkpoint):
  """The sampler's fused layout (one qkv_proj, one gate_up_proj per layer) has the shapes
  `Decoder(fused=True)` declares and gives the unfused logits (and so transformers'); the
  Llama checkpoint (8 query heads over 2 KV heads) in the scanned layout, the others not."""
  import jax
  from ragjax.models.decoder import abstract_params
  from ragjax.models.fused import fuse_projections
  kind, path, model = checkpoint
  scan_layers = kind == "llama_scaled"
  cfg, params = load_decoder(path, scan_layers=scan_layers)
  fused = fuse_projections(cfg, params)
  shapes = lambda t: jax.tree.map(lambda x: x.shape, t)
  assert shapes(fused) == shapes(abstract_params(cfg, fused=True))
  assert fused["embed_tokens"]["embedding"] is params["embed_tokens"]["embedding"]
  tokens, mask = padded_batch(cfg.vocab_size, LENGTHS)
  run = lambda model, p: jax.jit(model.apply)({"params": p}, jnp.asarray(tokens),
                                              attention_mask=jnp.asarray(mask))[0]
  plain, out = run(Decoder(cfg), params), run(Decoder(cfg, fused=True), fused)
  valid = mask.astype(bool)
  assert np.abs(np.asarray(out) - np.asarray(plain))[valid].max() <= 1e-5, kind
  assert np.abs(np.asarray(out) - torch_logits(model, tokens, mask))[valid].max() <= 1e-4, kind


def test_dot_product_attention_gives_transformers_logits(checkpoint):
  """attention_impl="xla" (jax.nn.dot_product_attention; "cudnn" on GPUs) on a padded batch."""
  import jax
  kind, path, model = checkpoint
  cfg, params = load_decoder(path, attention_impl="xla")
  tokens, mask = padded_batch(cfg.vocab_size, LENGTHS)
  out, _ = jax.jit(Decoder(cfg).apply)({"params": params}, jnp.asarray(tokens),
                                       attention_mask=jnp.asarray(mask))
  diff = np.abs(np.asarray(out) - torch_logits(model, tokens, mask))[mask.astype(bool)]
  assert diff.max() <= 1e-4, f"{kind}: max |dlogit| {diff.max()}"


def test_dot_product_attention_cached_and_gradients_equal_ragjax_attention():
  """attention_impl="xla": a prefill, an extend of rows at different slots and a decode step
  into the cache give ragjax's attention's logits, per-layer and stacked; gradients equal."""
  import jax
  base = get_preset("tiny")
  params = random_params(base)
  rng = np.random.RandomState(5)
  tokens = jnp.asarray(rng.randint(0, base.vocab_size, (3, 9)), jnp.int32)
  calls = [(tokens[:, :4], [0, 0, 0]), (tokens[:, 4:8], [4, 2, 16]), (tokens[:, 8:], [8, 6, 4])]
  for scan in (False, True):
    outs = {}
    for impl in ("", "xla"):
      cfg = base.replace(attention_impl=impl)
      apply = jax.jit(Decoder(cfg, attend_length=16).apply)
      cache = init_cache(cfg.replace(scan_layers=scan), 3, 16)
      outs[impl] = []
      for toks, starts in calls:
        lg, cache = apply({"params": params}, toks, cache=cache,
                          cache_start=jnp.asarray(starts, jnp.int32))
        outs[impl].append(np.asarray(lg))
    for a, b in zip(outs[""], outs["xla"]):
      np.testing.assert_allclose(a, b, atol=1e-5)

  def grad(cfg):
    loss = lambda p: (Decoder(cfg).apply({"params": p}, tokens)[0] ** 2).mean()
    return jax.jit(jax.grad(loss))(params)
  for a, b in zip(jax.tree.leaves(grad(base)), jax.tree.leaves(grad(base.replace(
      attention_impl="xla")))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
  with pytest.raises(ValueError, match="'cudnn' needs dtype bfloat16"):
    base.replace(attention_impl="cudnn")


def test_causal_query_blocks_match_transformers(checkpoint, monkeypatch):
  """Full-sequence attention in query blocks (each against the keys up to its end) gives
  transformers' logits: blocks of 4 over 11 tokens (4 + 4 + 3), padded rows included."""
  from ragjax.models import decoder
  monkeypatch.setattr(decoder, "CAUSAL_BLOCK", 4)
  kind, path, model = checkpoint
  cfg, params = load_decoder(path)
  tokens, mask = padded_batch(cfg.vocab_size, LENGTHS)
  out, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                              attention_mask=jnp.asarray(mask))
  diff = np.abs(np.asarray(out) - torch_logits(model, tokens, mask))[mask.astype(bool)]
  assert diff.max() <= 1e-4, f"{kind}: max |dlogit| {diff.max()}"


@pytest.mark.parametrize("layout", ["per_layer", "stacked", "scan"])
def test_cached_decoding_equals_full_forward(checkpoint, layout):
  """Prefill a prefix, then feed the rest one token at a time: same logits as one pass, in
  each cache layout (per-layer arrays; the stacked array in the unrolled layer loop and
  carried by nn.scan)."""
  _, path, _ = checkpoint
  cfg, params = load_decoder(path, scan_layers=layout == "scan")
  model = Decoder(cfg)
  tokens, mask = padded_batch(cfg.vocab_size, LENGTHS, seed=1)
  full, _ = model.apply({"params": params}, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
  b, t = tokens.shape
  cache = init_cache(cfg.replace(scan_layers=layout != "per_layer"), b, 16)
  assert (cache["k"].ndim == 5) if layout != "per_layer" else (
      len(cache["k"]) == cfg.num_layers and cache["k"][0].shape == (b, cfg.num_kv_heads, 16,
                                                                     cfg.head_dim))
  prefix = 2
  start = jnp.zeros((b,), jnp.int32)
  step_logits, cache = model.apply({"params": params}, jnp.asarray(tokens[:, :prefix]),
                                   cache=cache, cache_start=start)
  outs = [step_logits]
  for i in range(prefix, t):
    lg, cache = model.apply({"params": params}, jnp.asarray(tokens[:, i:i + 1]), cache=cache,
                            cache_start=jnp.full((b,), i, jnp.int32))
    outs.append(lg)
  cached = np.concatenate([np.asarray(o) for o in outs], axis=1)
  valid = mask.astype(bool)
  assert np.abs(cached - np.asarray(full))[valid].max() <= 1e-5


def test_rows_at_different_slots_extend_independently():
  """Per-row cache_start: each row continues from its own length, as after tool turns."""
  cfg = get_preset("tiny")
  params = random_params(cfg)
  model = Decoder(cfg)
  apply = __import__("jax").jit(model.apply)        # op by op it costs seconds of dispatch
  rng = np.random.RandomState(3)
  seqs = [rng.randint(0, cfg.vocab_size, n) for n in (9, 5)]
  cache = init_cache(cfg, 2, 16)
  # Prefill both rows to their own lengths (right padded), then append 3 tokens to each.
  pre = np.zeros((2, 6), np.int32)
  pre[0], pre[1, :3] = seqs[0][:6], seqs[1][:3]
  _, cache = apply({"params": params}, jnp.asarray(pre), cache=cache,
                   cache_start=jnp.zeros(2, jnp.int32))
  ext = np.stack([seqs[0][6:9], seqs[1][3:6] if len(seqs[1]) >= 6 else np.r_[seqs[1][3:], 0]])
  lg, cache = apply({"params": params}, jnp.asarray(ext), cache=cache,
                    cache_start=jnp.asarray([6, 3], jnp.int32))
  for row, n_prev in ((0, 6), (1, 3)):
    seq = np.r_[pre[row, :n_prev], ext[row]]
    ref, _ = apply({"params": params}, jnp.asarray(seq[None]))
    np.testing.assert_allclose(np.asarray(lg[row]), np.asarray(ref[0, n_prev:]), atol=1e-5)


def test_value_head_gives_one_scalar_per_token():
  import jax
  cfg = get_preset("tiny")
  params = random_params(cfg, head="value")
  assert "value_head" in params and "lm_head" not in params
  params["value_head"]["bias"] = jnp.asarray([0.5])
  values, _ = Decoder(cfg, head="value").apply({"params": params}, jnp.ones((2, 5), jnp.int32))
  assert values.shape == (2, 5)
  np.testing.assert_allclose(np.asarray(values), 0.5, atol=1e-6)  # zero-init kernel + bias


def test_remat_scan_gradients_equal_plain_and_bf16_runs():
  import jax
  plain = get_preset("tiny")
  cfg = plain.replace(remat=True, scan_layers=True)
  params = random_params(plain)
  stacked = dict(params)
  layers = [stacked.pop(f"layers_{i}") for i in range(plain.num_layers)]
  stacked["layers"] = {"layer": jax.tree.map(lambda *x: jnp.stack(x), *layers)}
  tokens = jnp.arange(8, dtype=jnp.int32).reshape(1, 8)

  def loss(c, p):
    out, _ = Decoder(c).apply({"params": p}, tokens)
    return (out ** 2).mean()

  # Jitted: op-by-op (eager) gradients of even this tiny model cost seconds of dispatch.
  g_plain = jax.jit(jax.grad(lambda p: loss(plain, p)))(params)
  g_remat = jax.jit(jax.grad(lambda p: loss(cfg, p)))(stacked)
  np.testing.assert_allclose(np.asarray(g_remat["layers"]["layer"]["mlp"]["up_proj"]["kernel"][1]),
                             np.asarray(g_plain["layers_1"]["mlp"]["up_proj"]["kernel"]), atol=1e-6)
  bf = plain.replace(dtype="bfloat16", param_dtype="bfloat16")
  p16 = random_params(bf)
  assert p16["norm"]["scale"].dtype == jnp.bfloat16
  out, _ = jax.jit(Decoder(bf).apply)({"params": p16}, tokens)
  assert bool(jnp.isfinite(out).all())


def test_remat_policy_dots_recomputes_only_the_attention_products():
  """remat_policy="dots" keeps each layer's projection outputs: the backward pass runs again
  only the attention's two batched products per layer (full remat: every forward product the
  backward needs, 8 per layer here); gradients equal the plain ones, scanned layers too."""
  import jax
  plain = get_preset("tiny")
  params = random_params(plain)
  tokens = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)

  def grad(c):
    def loss(p):
      out, _ = Decoder(c).apply({"params": p}, tokens)
      return (out ** 2).mean()
    return jax.jit(jax.grad(loss))

  dots = lambda c, p: grad(c).lower(p).as_text().count("stablehlo.dot_general")
  full, kept = plain.replace(remat=True), plain.replace(remat=True, remat_policy="dots")
  base = dots(plain, params)
  layers = plain.num_layers
  assert dots(full, params) - base == 8 * layers
  assert dots(kept, params) - base == 2 * layers
  g_plain = grad(plain)(params)
  for a, b in zip(jax.tree.leaves(grad(kept)(params)), jax.tree.leaves(g_plain)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
  stacked = dict(params)
  layer_params = [stacked.pop(f"layers_{i}") for i in range(layers)]
  stacked["layers"] = {"layer": jax.tree.map(lambda *x: jnp.stack(x), *layer_params)}
  g_scan = grad(kept.replace(scan_layers=True))(stacked)
  np.testing.assert_allclose(np.asarray(g_scan["layers"]["layer"]["mlp"]["down_proj"]["kernel"][1]),
                             np.asarray(g_plain["layers_1"]["mlp"]["down_proj"]["kernel"]),
                             atol=1e-6)
  with pytest.raises(ValueError, match="unknown remat_policy 'some'"):
    plain.replace(remat_policy="some")
