"""LoRA: a fresh adapter is the base model; a trained one equals an independent adapter-aware
forward (hooks on the transformers model adding x A B * alpha/r to each projection); the merged
HF export has the adapted model's logits; stacked (scan) params merge like per-layer ones."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.models.decoder import Decoder, init_params
from ragjax.models.hf_io import load_decoder, save_decoder
from ragjax.models.lora import (ALL_TARGETS, LoraConfig, adapter_from_config, init_adapters,
                                merge, num_adapter_params)
from ragjax.models.presets import get_preset
from tests._model_helpers import make_hf_decoder, padded_batch, torch_logits

LORA = LoraConfig(rank=4, alpha=8.0, seed=3)


def randomised(adapters, seed=1):
  """Adapters as after training: B no longer zero."""
  keys = iter(jax.random.split(jax.random.PRNGKey(seed), 1000))
  return jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape), adapters)


def logits(cfg, params, tokens, mask):
  out, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                              attention_mask=jnp.asarray(mask))
  return np.asarray(out)


def test_fresh_adapters_leave_the_model_unchanged_and_count():
  cfg = get_preset("tiny")
  params = init_params(cfg, jax.random.PRNGKey(0))
  ad = init_adapters(params, LORA)
  assert set(ad["layers_0"]["self_attn"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
  assert ad["layers_0"]["self_attn"]["o_proj"]["lora_a"].shape == (4 * 16, 4)   # (H*D, r)
  assert ad["layers_0"]["self_attn"]["q_proj"]["lora_b"].shape == (4, 4 * 16)
  # per layer: q (64+64) k (64+32) v (64+32) o (64+64) gate/up (64+128) x2 down (128+64), x r
  assert num_adapter_params(ad) == 2 * 4 * (128 + 96 + 96 + 128 + 192 * 2 + 192)
  merged = merge(params, ad, LORA)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(merged)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  only_q = init_adapters(params, LoraConfig(rank=2, targets=("q_proj",)))
  assert list(only_q["layers_1"]) == ["self_attn"] and list(only_q["layers_1"]["self_attn"]) == ["q_proj"]


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="model.lora.targets: unknown projection"):
    adapter_from_config({"rank": 4, "targets": ("q_proj", "qkv")})
  with pytest.raises(ValueError, match="model.lora.rank"):
    LoraConfig(rank=-1)
  assert adapter_from_config({"rank": 0}) is None


@pytest.mark.parametrize("kind", ["qwen2_tied", "llama_scaled"])
def test_merged_equals_adapter_aware_forward_and_the_merged_export(kind, tmp_path):
  import torch
  from transformers import AutoModelForCausalLM
  model = make_hf_decoder(kind)
  src = str(tmp_path / "src")
  model.save_pretrained(src)
  cfg, params = load_decoder(src)
  ad = randomised(init_adapters(params, LORA))
  merged = merge(params, ad, LORA)
  tokens, mask = padded_batch(cfg.vocab_size, (9, 5))
  ours = logits(cfg, merged, tokens, mask)
  # the adapted model computed without merging: y = W x + scale * (x A) B on every target
  hooks = []
  for i, layer in enumerate(model.model.layers):
    for name in ALL_TARGETS:
      group = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
      mod = getattr(getattr(layer, group), name)
      a, b = (torch.tensor(np.asarray(ad[f"layers_{i}"][group][name][k]))
              for k in ("lora_a", "lora_b"))
      hooks.append(mod.register_forward_hook(
          lambda m, inp, out, a=a, b=b: out + LORA.scale * (inp[0] @ a @ b)))
  adapted = torch_logits(model, tokens, mask)
  for h in hooks:
    h.remove()
  valid = mask.astype(bool)
  assert np.abs(ours - adapted)[valid].max() <= 2e-4
  base = torch_logits(model, tokens, mask)
  assert np.abs(base - adapted)[valid].max() > 1e-2        # the adapters do change the model
  # the merged export, loaded by transformers, is the adapted model
  dst = str(tmp_path / "merged")
  save_decoder(dst, cfg, merged)
  exported = torch_logits(AutoModelForCausalLM.from_pretrained(dst).eval(), tokens, mask)
  assert np.abs(exported - ours)[valid].max() <= 2e-4


def test_stacked_scan_params_merge_like_per_layer_params():
  cfg = get_preset("tiny")
  params = init_params(cfg, jax.random.PRNGKey(0))
  ad = randomised(init_adapters(params, LORA))
  want = logits(cfg, merge(params, ad, LORA), *padded_batch(cfg.vocab_size, (7, 3)))
  stack = lambda tree: jax.tree.map(lambda *xs: jnp.stack(xs),            # noqa: E731
                                    *[tree[f"layers_{i}"] for i in range(cfg.num_layers)])
  scan_cfg = cfg.replace(scan_layers=True)
  scan_params = {k: v for k, v in params.items() if not k.startswith("layers_")}
  scan_params["layers"] = {"layer": stack(params)}
  scan_ad = {"layers": {"layer": stack(ad)}}
  fresh = init_adapters(scan_params, LORA)
  assert fresh["layers"]["layer"]["mlp"]["down_proj"]["lora_a"].shape == (2, 128, 4)
  got = logits(scan_cfg, merge(scan_params, scan_ad, LORA), *padded_batch(cfg.vocab_size, (7, 3)))
  np.testing.assert_allclose(got, want, atol=2e-5)


# --- the train step's adapter-aware forward and top-k layers ------------------------------

def _stacked(cfg, params):
  """A per-layer params tree in the scan layout (`scan_layers=True`)."""
  out = {k: v for k, v in params.items() if not k.startswith("layers_")}
  out["layers"] = {"layer": jax.tree.map(lambda *xs: jnp.stack(xs),
                                         *[params[f"layers_{i}"] for i in range(cfg.num_layers)])}
  return out


def _loss_and_grads(cfg, lora, params, adapters, tokens, mask, forward):
  """A log-likelihood loss over the batch and its gradient w.r.t. the adapters, through the
  adapter-aware forward or through the merge."""
  from ragjax.rl.logprobs import sequence_logprobs
  adapter = adapter_from_config(dict(rank=lora.rank, alpha=lora.alpha, layers=lora.layers,
                                     forward=forward))

  def loss(ad):
    tree = adapter.train_combine(ad, params)
    logp, _ = sequence_logprobs(cfg, tree, tokens, None, mask, chunk=128,
                                hidden_fn=adapter.hidden_fn(cfg))
    return -(logp * mask).sum() / mask.sum()

  fn = jax.jit(jax.value_and_grad(loss))
  (value, grads), flops = fn(adapters), fn.lower(adapters).compile().cost_analysis()
  flops = (flops[0] if isinstance(flops, (list, tuple)) else flops or {}).get("flops")
  return float(value), grads, flops


@pytest.mark.parametrize("scan", [False, True])
def test_adapter_aware_gradients_equal_the_merged_forms_at_fewer_flops(scan):
  cfg = get_preset("tiny").replace(num_layers=3, scan_layers=scan)
  params = init_params(cfg.replace(scan_layers=False), jax.random.PRNGKey(0))
  ad = randomised(init_adapters(params, LORA))
  if scan:
    params, ad = _stacked(cfg, params), {"layers": {"layer": jax.tree.map(
        lambda *xs: jnp.stack(xs), *[ad[f"layers_{i}"] for i in range(3)])}}
  tokens, mask = (jnp.asarray(x) for x in padded_batch(cfg.vocab_size, (9, 6)))
  v_ad, g_ad, f_ad = _loss_and_grads(cfg, LORA, params, ad, tokens, mask, "adapter")
  v_m, g_m, f_m = _loss_and_grads(cfg, LORA, params, ad, tokens, mask, "merged")
  assert abs(v_ad - v_m) < 1e-5
  for a, b in zip(jax.tree.leaves(g_ad), jax.tree.leaves(g_m)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=2e-4)
  assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(g_ad)) > 1e-3   # not all zero
  if f_ad and f_m:          # no param-sized weight gradient: fewer FLOPs than the merged form
    assert f_ad < f_m, (f_ad, f_m)


@pytest.mark.parametrize("scan", [True])
def test_top_k_layers_train_like_full_lora_with_the_lower_adapters_frozen(scan):
  cfg = get_preset("tiny").replace(num_layers=4, scan_layers=scan)
  flat_params = init_params(cfg.replace(scan_layers=False), jax.random.PRNGKey(0))
  params = _stacked(cfg, flat_params) if scan else flat_params
  top = LoraConfig(rank=4, alpha=8.0, seed=3, layers=2)
  ad_top = randomised(init_adapters(params, top))
  if scan:
    assert ad_top["layers"]["layer"]["mlp"]["down_proj"]["lora_a"].shape == (2, 128, 4)
  else:
    assert sorted(ad_top) == ["layers_2", "layers_3"]
  # the same adapters as full LoRA: the lower two layers' adapters fresh (B = 0)
  full = init_adapters(params, LORA)
  if scan:
    full = jax.tree.map(lambda f, t: f.at[2:].set(t), full, ad_top)
  else:
    full = {**full, **ad_top}
  tokens, mask = (jnp.asarray(x) for x in padded_batch(cfg.vocab_size, (8, 5)))
  # merged top-k == merged full (the lower adapters are zero updates)
  np.testing.assert_allclose(logits(cfg, merge(params, ad_top, top), tokens, mask),
                             logits(cfg, merge(params, full, LORA), tokens, mask), atol=2e-5)
  v_top, g_top, _ = _loss_and_grads(cfg, top, params, ad_top, tokens, mask, "adapter")
  v_full, g_full, _ = _loss_and_grads(cfg, LORA, params, full, tokens, mask, "adapter")
  assert abs(v_top - v_full) < 1e-5
  upper = (jax.tree.map(lambda g: g[2:], g_full) if scan
           else {k: g_full[k] for k in ("layers_2", "layers_3")})
  for a, b in zip(jax.tree.leaves(g_top), jax.tree.leaves(upper)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=2e-4)
  # the merged forward of the top-k adapters gives the same gradients
  _, g_merged, _ = _loss_and_grads(cfg, top, params, ad_top, tokens, mask, "merged")
  for a, b in zip(jax.tree.leaves(g_top), jax.tree.leaves(g_merged)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=2e-4)


def test_top_k_config_errors():
  with pytest.raises(ValueError, match="model.lora.layers must be >= 0"):
    LoraConfig(rank=2, layers=-1)
  with pytest.raises(ValueError, match="model.lora.forward"):
    LoraConfig(rank=2, forward="fused")
  params = init_params(get_preset("tiny"), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="model.lora.layers=3 but the model has 2 layers"):
    init_adapters(params, LoraConfig(rank=2, layers=3))
