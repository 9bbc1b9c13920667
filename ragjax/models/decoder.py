"""Llama-3.x / Qwen2 decoder in Flax linen: one forward for training, scoring and decoding.

Calling conventions
-------------------
* Full sequences (training, scoring): `tokens [B, T]`, optional `positions [B, T]` and
  `attention_mask [B, T]` (1 = real token); attention is causal plus key padding.
* Cached decoding (prefill, extend, one-token decode): pass `cache` (see `init_cache`) and
  `cache_start [B]`, the slot where each row's new tokens go.  Row b's T new tokens are written
  to slots `cache_start[b] .. cache_start[b]+T-1` (writes past the cache end are dropped) and
  attend causally to every slot at or before their own.  Positions default to the slot index.
  Rows may sit at different slots, which is what multi-turn rollouts need.

The model is a pure function of its params: `Decoder(cfg).apply({"params": p}, ...)`.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from ragjax.models.config import DecoderConfig, as_dtype
from ragjax.models.layers import RMSNorm, apply_rope, logical_init, rope_inv_freq

Cache = dict  # {"k": [L, B, S, KVH, D], "v": [L, B, S, KVH, D]}

_KERNEL_INIT = nn.initializers.normal(0.02)


def init_cache(cfg: DecoderConfig, batch: int, length: int, dtype=None) -> Cache:
  """An empty KV cache; bf16 on accelerators is the usual `dtype`."""
  dtype = as_dtype(dtype or cfg.dtype)
  shape = (cfg.num_layers, batch, length, cfg.num_kv_heads, cfg.head_dim)
  return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


CACHE_LOGICAL_AXES = ("layers", "batch", "cache_length", "kv_heads", "head_dim")


class Attention(nn.Module):
  cfg: DecoderConfig
  attend_length: Optional[int] = None   # cached decoding: attend to the first N slots only

  @nn.compact
  def __call__(self, x, positions, attention_mask, kv, cache_start, layer=0):
    """`kv` is the whole stacked cache (k, v) [L, B, S, KVH, D] or None; this layer writes its
    new keys/values into slice `layer` with one scatter, so XLA updates the (donated) cache in
    place instead of copying a layer slice out and back every decode step."""
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    h, kvh, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

    def proj(name, heads, bias, axes):
      return nn.DenseGeneral(
          (heads, d), use_bias=bias, dtype=dt, param_dtype=pdt, name=name,
          kernel_init=logical_init(_KERNEL_INIT, ("embed", axes, "head_dim")),
          bias_init=logical_init(nn.initializers.zeros, (axes, "head_dim")))(x)

    q = proj("q_proj", h, cfg.qkv_bias, "heads")
    k = proj("k_proj", kvh, cfg.qkv_bias, "kv_heads")
    v = proj("v_proj", kvh, cfg.qkv_bias, "kv_heads")
    inv_freq = rope_inv_freq(d, cfg.rope_theta, cfg.rope_scaling)
    q = apply_rope(q, positions, inv_freq)
    k = apply_rope(k, positions, inv_freq)

    b, t = x.shape[:2]
    q_slots = jnp.arange(t)[None, :]
    if kv is None:
      keys, values = k, v
      k_slots = jnp.arange(t)
      valid = k_slots[None, None, :] <= q_slots[:, :, None]                # [1, T, T]
      if attention_mask is not None:
        valid = valid & attention_mask[:, None, :].astype(bool)
      new_kv = None
    else:
      k_all, v_all = kv
      slots = cache_start[:, None] + q_slots                                # [B, T]
      rows = jnp.arange(b)[:, None]
      k_all = k_all.at[layer, rows, slots].set(k.astype(k_all.dtype), mode="drop")
      v_all = v_all.at[layer, rows, slots].set(v.astype(v_all.dtype), mode="drop")
      # Only the first `attend_length` slots can hold a visible key: the caller guarantees
      # every row's position stays below it, so the rest of the cache is neither read nor
      # scored (a short turn early in a long cache costs what its length needs).
      n = min(self.attend_length or k_all.shape[2], k_all.shape[2])
      window = (1, b, n) + k_all.shape[3:]
      keys = jax.lax.dynamic_slice(k_all, (layer, 0, 0, 0, 0), window)[0].astype(dt)
      values = jax.lax.dynamic_slice(v_all, (layer, 0, 0, 0, 0), window)[0].astype(dt)
      k_slots = jnp.arange(n)
      valid = k_slots[None, None, :] <= slots[:, :, None]                  # [B, T, S]
      new_kv = (k_all, v_all)

    qg = q.reshape(b, t, kvh, h // kvh, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, keys,
                        preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(d))
    scores = jnp.where(valid[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, values).reshape(b, t, h, d)
    out = nn.DenseGeneral(
        cfg.hidden_size, axis=(-2, -1), use_bias=cfg.o_bias, dtype=dt, param_dtype=pdt,
        name="o_proj", kernel_init=logical_init(_KERNEL_INIT, ("heads", "head_dim", "embed")),
        bias_init=logical_init(nn.initializers.zeros, ("embed",)))(out)
    return out, new_kv


class MLP(nn.Module):
  cfg: DecoderConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)

    def dense(name, feats, axes):
      return nn.Dense(feats, use_bias=cfg.mlp_bias, dtype=dt, param_dtype=pdt, name=name,
                      kernel_init=logical_init(_KERNEL_INIT, axes),
                      bias_init=logical_init(nn.initializers.zeros, axes[1:]))

    gate = dense("gate_proj", cfg.intermediate_size, ("embed", "mlp"))(x)
    up = dense("up_proj", cfg.intermediate_size, ("embed", "mlp"))(x)
    return dense("down_proj", cfg.hidden_size, ("mlp", "embed"))(nn.silu(gate) * up)


class DecoderLayer(nn.Module):
  cfg: DecoderConfig
  attend_length: Optional[int] = None

  @nn.compact
  def __call__(self, x, positions, attention_mask, kv, cache_start, layer=0):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    norm = lambda name: RMSNorm(cfg.rms_norm_eps, dt, pdt, name=name)
    attn, new_kv = Attention(cfg, self.attend_length, name="self_attn")(
        norm("input_layernorm")(x), positions, attention_mask, kv, cache_start, layer)
    x = x + attn
    x = x + MLP(cfg, name="mlp")(norm("post_attention_layernorm")(x))
    return x, new_kv


class _ScanLayer(nn.Module):
  """Adapter so nn.scan carries (x, whole cache, layer index) through the layers."""
  cfg: DecoderConfig
  attend_length: Optional[int] = None

  @nn.compact
  def __call__(self, carry, positions, attention_mask, cache_start):
    x, kv, i = carry
    layer = DecoderLayer
    if self.cfg.remat:
      layer = nn.remat(DecoderLayer, prevent_cse=False)
    x, new_kv = layer(self.cfg, self.attend_length, name="layer")(
        x, positions, attention_mask, kv, cache_start, i)
    return (x, new_kv, i + 1), None


class Decoder(nn.Module):
  """Causal LM (`head="lm"`) or value model (`head="value"`, one scalar per token).

  `attend_length` (cached decoding only): queries attend to the first N cache slots, which
  must hold every position in use; None attends to the whole cache.
  """
  cfg: DecoderConfig
  head: str = "lm"
  attend_length: Optional[int] = None

  @nn.compact
  def __call__(self, tokens, positions=None, attention_mask=None, cache: Optional[Cache] = None,
               cache_start=None, return_hidden: bool = False):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    b, t = tokens.shape
    if cache is not None and cache_start is None:
      raise ValueError("cached decoding needs cache_start [B]")
    if positions is None:
      base = jnp.zeros((b,), jnp.int32) if cache is None else cache_start
      positions = base[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]

    embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=dt, param_dtype=pdt,
                     embedding_init=logical_init(_KERNEL_INIT, ("vocab", "embed")),
                     name="embed_tokens")
    x = embed(tokens)

    new_cache = None
    if cfg.scan_layers:
      scan = nn.scan(_ScanLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                     in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                     length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
      kv = None if cache is None else (cache["k"], cache["v"])
      (x, new_kv, _), _ = scan(cfg, self.attend_length, name="layers")((x, kv, jnp.int32(0)), positions,
                                                   attention_mask, cache_start)
      if cache is not None:
        new_cache = {"k": new_kv[0], "v": new_kv[1]}
    else:
      layer_cls = nn.remat(DecoderLayer) if cfg.remat else DecoderLayer
      kv = None if cache is None else (cache["k"], cache["v"])
      for i in range(cfg.num_layers):
        x, kv = layer_cls(cfg, self.attend_length, name=f"layers_{i}")(x, positions, attention_mask, kv,
                                                   cache_start, i)
      if cache is not None:
        new_cache = {"k": kv[0], "v": kv[1]}

    x = RMSNorm(cfg.rms_norm_eps, dt, pdt, name="norm")(x)
    if return_hidden:
      return x, new_cache
    if self.head == "value":
      value = nn.Dense(1, dtype=jnp.float32, param_dtype=pdt, name="value_head",
                       kernel_init=logical_init(nn.initializers.zeros, ("embed", "value")),
                       bias_init=logical_init(nn.initializers.zeros, ("value",)))(x)
      return value[..., 0], new_cache
    if cfg.tie_word_embeddings:
      logits = embed.attend(x.astype(dt))
    else:
      logits = nn.Dense(cfg.vocab_size, use_bias=False, dtype=dt, param_dtype=pdt,
                        name="lm_head",
                        kernel_init=logical_init(_KERNEL_INIT, ("embed", "vocab")))(x)
    return logits.astype(jnp.float32), new_cache


def unembedding(cfg: DecoderConfig, params) -> jnp.ndarray:
  """The [E, V] output projection (tied embedding transposed or lm_head), for chunked log-probs."""
  if cfg.tie_word_embeddings:
    return params["embed_tokens"]["embedding"].T
  return params["lm_head"]["kernel"]


def dummy_inputs(batch: int = 1, length: int = 1):
  return jnp.zeros((batch, length), jnp.int32)


def init_params(cfg: DecoderConfig, rng, head: str = "lm"):
  """Random params (unboxed) for tests and from-scratch policies."""
  variables = Decoder(cfg, head=head).init(rng, dummy_inputs())
  return nn.unbox(variables["params"])


def param_logical_axes(cfg: DecoderConfig, head: str = "lm"):
  """A tree of PartitionSpecs of logical axis names, shaped like the params."""
  abstract = jax.eval_shape(lambda: Decoder(cfg, head=head).init(jax.random.PRNGKey(0),
                                                                   dummy_inputs()))
  return nn.get_partition_spec(abstract)["params"]


def abstract_params(cfg: DecoderConfig, head: str = "lm"):
  abstract = jax.eval_shape(lambda: Decoder(cfg, head=head).init(jax.random.PRNGKey(0),
                                                                   dummy_inputs()))
  return nn.unbox(abstract)["params"]
