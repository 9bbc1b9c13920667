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

from ragjax.models.model_config import DecoderConfig, as_dtype
from ragjax.models import cpu_attention
from ragjax.models.kv_cache import Cache, init_cache, is_stacked  # noqa: F401
from ragjax.models.pallas_decode import decode_attention as pallas_attention
from ragjax.models.pallas_decode import supported as pallas_supported
from ragjax.models.layers import RMSNorm, logical_init, rope_inv_freq, rope_tables, rotate

_KERNEL_INIT = nn.initializers.normal(0.02)


def tokens_flat(x: jnp.ndarray) -> jnp.ndarray:
  """[..., E] -> [N, E]: the projections see one token axis.  XLA's CPU backend computes a
  weight gradient contracted over two axes (batch and length) by first writing the output
  gradient transposed, a strided copy that cost as much as the layer's matmuls; over one
  axis it contracts in place (the MLP's backward pass ran 2x faster)."""
  return x.reshape(-1, x.shape[-1])


def write_slots(cache, index, new):
  """`cache.at[index].set(new)` for rows' new keys or values (writes past the end dropped).
  The (row, slot) pairs of one write are distinct (every row its own), so the scatter is
  marked unique: XLA's GPU backend then stores each update directly rather than through
  atomic read-modify-writes (16-bit ones are a compare-and-swap loop)."""
  return cache.at[index].set(new.astype(cache.dtype), mode="drop", unique_indices=True)


def _attend_heads_major(qh, keys, values, valid, groups: int, dt):
  """Softmax attention as plain batched matmuls: qh [B, KVH, G*T, D], keys / values
  [B, KVH, S, D], valid [B, T, S] -> [B, KVH, G*T, D].

  The score tensor is the big one (S per query against D), so it is passed over as few
  times as possible: the scale goes on the queries, the max shift carries no gradient (the
  softmax does not depend on it), and the normaliser divides the [.., D] output rather than
  the [.., S] probabilities (the backward pass then has no [.., S] division either)."""
  b, kvh, gt, d = qh.shape
  qh = qh * jnp.asarray(1.0 / d ** 0.5, qh.dtype)
  scores = jax.lax.dot_general(qh, keys, (((3,), (3,)), ((0, 1), (0, 1))),
                               preferred_element_type=jnp.float32)
  scores = scores.reshape(b, kvh, groups, gt // groups, -1)
  scores = jnp.where(valid[:, None, None], scores, jnp.finfo(jnp.float32).min)
  shift = jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True))
  weights = jnp.exp(scores - shift)
  norm = weights.sum(axis=-1).reshape(b, kvh, gt, 1)
  out = _mix_heads_major(weights.astype(dt), values)
  return (out.astype(jnp.float32) / norm).astype(dt)


# Full-sequence (training, scoring) attention runs in query blocks of this many tokens, each
# against the keys up to its own end: causal attention never reads the rest, so a sequence of
# n blocks computes (n + 1) / 2n of the score tensor (0.75 at 256 tokens, 0.625 at 512).
CAUSAL_BLOCK = 128


def _attend_causal_blocks(qg, keys, values, valid, dt, block: int):
  """Causal attention of qg [B, KVH, G, T, D] in query blocks (see CAUSAL_BLOCK): block i's
  queries attend keys / values [B, KVH, :end_i, D] under valid [B, T, :end_i] ->
  [B, KVH, G*T, D], as `_attend_heads_major` over all keys gives."""
  b, kvh, g, t, d = qg.shape
  outs = []
  for start in range(0, t, block):
    end = min(start + block, t)
    qb = qg[:, :, :, start:end].reshape(b, kvh, g * (end - start), d)
    ob = _attend_heads_major(qb, keys[:, :, :end], values[:, :, :end],
                             valid[:, start:end, :end], g, dt)
    outs.append(ob.reshape(b, kvh, g, end - start, d))
  return jnp.concatenate(outs, axis=3).reshape(b, kvh, g * t, d)


def _mix_heads_major(probs, values):
  """probs [B, KVH, G, T, S] x values [B, KVH, S, D] -> [B, KVH, G*T, D] as one batched
  matmul: written as an einsum, XLA's CPU backend contracts S as the values' leading
  dimension with a slow generic dot (5x the time of this form at a 2,688-slot cache)."""
  b, kvh, g, t, s = probs.shape
  return jax.lax.dot_general(probs.reshape(b, kvh, g * t, s), values,
                             (((3,), (2,)), ((0, 1), (0, 1))))


def _uncached_keys(k, v, attention_mask):
  """Keys and values of a forward without a cache: (keys, values, valid [1 or B, T, T], None,
  query slots, None).  Heads-major (a copy of T x KVH x D per row), so the score and mix
  products are plain batched matmuls (see the cached path)."""
  t = k.shape[1]
  q_slots = jnp.arange(t)[None, :]
  keys, values = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  k_slots = jnp.arange(t)
  valid = k_slots[None, None, :] <= q_slots[:, :, None]                # [1, T, T]
  if attention_mask is not None:
    valid = valid & attention_mask[:, None, :].astype(bool)
  return keys, values, valid, None, q_slots, None


def _cached_keys(kv, k, v, cache_start, layer, attend_length, dt):
  """The new keys/values written into the cache `kv` at each row's slots, and what the queries
  attend to: (keys, values, valid [B, T, S], new (k, v) cache, slots [B, T], window n,
  heads_major)."""
  b, t = k.shape[:2]
  q_slots = jnp.arange(t)[None, :]
  k_all, v_all = kv
  slots = cache_start[:, None] + q_slots                                # [B, T]
  rows = jnp.arange(b)[:, None]
  # Only the first `attend_length` slots can hold a visible key: the caller guarantees
  # every row's position stays below it, so the rest of the cache is neither read nor
  # scored (a short turn early in a long cache costs what its length needs).
  s = k_all.shape[2]
  n = min(attend_length or s, s)
  heads_major = False
  if is_stacked(k_all):
    index = (layer, rows, slots)
    k_all, v_all = write_slots(k_all, index, k), write_slots(v_all, index, v)
    window = (1, b, n) + k_all.shape[3:]
    keys = jax.lax.dynamic_slice(k_all, (layer, 0, 0, 0, 0), window)[0].astype(dt)
    values = jax.lax.dynamic_slice(v_all, (layer, 0, 0, 0, 0), window)[0].astype(dt)
  else:
    # [B, KVH, S, D]: the advanced indices (rows, slots) lead the update's shape, so the
    # new [B, T, KVH, D] keys go in as they are.
    index = (rows, slice(None), slots)
    k_all, v_all = write_slots(k_all, index, k), write_slots(v_all, index, v)
    keys, values = k_all, v_all
    if n < s:
      keys, values = keys[:, :, :n], values[:, :, :n]
    keys, values, heads_major = keys.astype(dt), values.astype(dt), True
  k_slots = jnp.arange(n)
  valid = k_slots[None, None, :] <= slots[:, :, None]                  # [B, T, S]
  return keys, values, valid, (k_all, v_all), slots, n, heads_major


def _cpu_kernel_attention(qg, new_kv, slots, n, dt):
  """Cached attention through `cpu_attention`: each row's keys and values read once, up to its
  own slot.  qg [B, T, KVH, G, D] -> [B, T, H, D]."""
  b, t, kvh, g, d = qg.shape
  qh = qg.transpose(0, 2, 3, 1, 4).reshape(b, kvh, g * t, d)
  out = cpu_attention.cached_attention(qh, new_kv[0], new_kv[1], slots, window=n)
  return out.astype(dt).reshape(b, kvh, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, kvh * g, d)


def _matmul_attention(qg, keys, values, valid, dt, cached: bool, attention_rows: int):
  """Several query tokens over heads-major keys as batched matmuls: [B, KVH, G*T, D] x
  [B, KVH, S, D] contracted on D, so XLA's CPU backend writes the scores in [.., T, S] order
  directly (the einsum form computes [.., S, T] and transposes the whole score tensor: 2x the
  attention time of an extend).  Long uncached sequences go in causal blocks; cached
  attention `attention_rows` rows at a time when set."""
  b, t, kvh, g, d = qg.shape
  q_major = qg.transpose(0, 2, 3, 1, 4)                              # [B, KVH, G, T, D]
  qh = q_major.reshape(b, kvh, g * t, d)
  valid_b = jnp.broadcast_to(valid, (b,) + valid.shape[1:])
  n = attention_rows if cached else 0
  if not cached and t >= 2 * CAUSAL_BLOCK:
    out = _attend_causal_blocks(q_major, keys, values, valid_b, dt, CAUSAL_BLOCK)
  elif n and b % n == 0 and b > n:
    chunk = lambda x: x.reshape((b // n, n) + x.shape[1:])
    out = jax.lax.map(lambda a: _attend_heads_major(*a, g, dt),
                      (chunk(qh), chunk(keys), chunk(values), chunk(valid_b)))
    out = out.reshape((b,) + out.shape[2:])
  else:
    out = _attend_heads_major(qh, keys, values, valid_b, g, dt)
  return out.reshape(b, kvh, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, kvh * g, d)


def _einsum_attention(qg, keys, values, valid, dt, heads_major: bool):
  """One einsum for scores and one for the mix: a decode step (T = 1) is fastest so (its
  [.., S, G] scores are small).  As in `_attend_heads_major`, the scale goes on the queries and
  the softmax's normaliser divides the [.., D] output rather than the [.., S] weights: two
  passes over the scores fewer (on an accelerator, fewer kernels per layer)."""
  b, t, kvh, g, d = qg.shape
  kv_spec = "bksd" if heads_major else "bskd"
  qs = qg * jnp.asarray(1.0 / d ** 0.5, qg.dtype)
  scores = jnp.einsum(f"btkgd,{kv_spec}->bkgts", qs, keys,
                      preferred_element_type=jnp.float32)
  scores = jnp.where(valid[:, None, None], scores, jnp.finfo(jnp.float32).min)
  weights = jnp.exp(scores - scores.max(axis=-1, keepdims=True))
  norm = weights.sum(axis=-1)                                           # [B, KVH, G, T]
  if heads_major:
    out = _mix_heads_major(weights.astype(dt), values)                  # [B, KVH, G*T, D]
    out = out.astype(jnp.float32) / norm.reshape(b, kvh, g * t, 1)
    return out.astype(dt).reshape(b, kvh, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, kvh * g, d)
  out = jnp.einsum("bkgts,bskd->btkgd", weights.astype(dt), values)
  out = out.astype(jnp.float32) / norm.transpose(0, 3, 1, 2)[..., None]
  return out.astype(dt).reshape(b, t, kvh * g, d)


def _library_attention(q, kv, valid, heads_major: bool, causal: bool, implementation: str):
  """`jax.nn.dot_product_attention` (cfg.attention_impl: "xla" or "cudnn") of q [B, T, H, D]
  over kv = (keys, values), [B, S, KVH, D] or heads-major [B, KVH, S, D] (transposed here),
  under valid [B or 1, T, S].  Without a cache the attention is causal (cuDNN then skips
  the blocks above the diagonal); cached rows attend up to their own slots (a mask)."""
  keys, values = kv
  if heads_major:
    keys, values = keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3)
  b, t = q.shape[:2]
  mask = jnp.broadcast_to(valid[:, None], (b, 1, t, keys.shape[1]))
  return jax.nn.dot_product_attention(q, keys, values, mask=mask, is_causal=causal,
                                      implementation=implementation)


def _pallas_decode_attention(q, keys, values, slots):
  """A decode step's attention in the Pallas kernel (`ragjax.models.pallas_decode`)."""
  b, t, h, d = q.shape
  return pallas_attention(q.reshape(b, h, d), keys, values, slots[:, 0] + 1).reshape(b, t, h, d)


class Attention(nn.Module):
  cfg: DecoderConfig
  attend_length: Optional[int] = None   # cached decoding: attend to the first N slots only
  attention_rows: int = 0   # cached multi-token attention N rows at a time (0: all at once)
  cpu_kernel: bool = False  # cached attention through ragjax.models.cpu_attention (CPU only)
  fused: bool = False       # one qkv_proj (ragjax.models.fused) instead of q/k/v_proj
  pallas_decode: bool = False   # decode steps' attention in ragjax.models.pallas_decode

  @nn.compact
  def __call__(self, x, rope, attention_mask, kv, cache_start, layer=0):
    """`rope`: the (cos, sin) tables of the tokens' positions (`layers.rope_tables`).
    `kv` is None (no cache), this layer's own (k, v) [B, KVH, S, D] (per-layer layout), or
    the whole stacked cache (k, v) [L, B, S, KVH, D], into whose slice `layer` this layer
    writes its new keys/values with one scatter, so XLA updates the (donated) cache in place
    instead of copying a layer slice out and back every decode step (see kv_cache)."""
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    h, kvh, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

    b, t = x.shape[:2]
    x_flat = tokens_flat(x)

    def proj(name, heads, bias, axes):
      return nn.DenseGeneral(
          (heads, d), use_bias=bias, dtype=dt, param_dtype=pdt, name=name,
          kernel_init=logical_init(_KERNEL_INIT, ("embed", axes, "head_dim")),
          bias_init=logical_init(nn.initializers.zeros, (axes, "head_dim")))(x_flat).reshape(
              b, t, heads, d)

    if self.fused:
      q, k, v = self._fused_qkv(x_flat, b, t)
    else:
      q = proj("q_proj", h, cfg.qkv_bias, "heads")
      k = proj("k_proj", kvh, cfg.qkv_bias, "kv_heads")
      v = proj("v_proj", kvh, cfg.qkv_bias, "kv_heads")
    q, k = rotate(q, rope), rotate(k, rope)

    if kv is None:
      keys, values, valid, new_kv, slots, n = _uncached_keys(k, v, attention_mask)
      heads_major = True
    else:
      keys, values, valid, new_kv, slots, n, heads_major = _cached_keys(
          kv, k, v, cache_start, layer, self.attend_length, dt)

    g = h // kvh
    qg = q.reshape(b, t, kvh, g, d)
    if kv is not None and heads_major and self.cpu_kernel and new_kv[0].dtype == jnp.float32:
      out = _cpu_kernel_attention(qg, new_kv, slots, n, dt)
    elif cfg.attention_impl and t > 1:
      out = _library_attention(q, (k, v) if kv is None else (keys, values), valid,
                               heads_major=kv is not None and heads_major, causal=kv is None,
                               implementation=cfg.attention_impl)
    elif heads_major and t > 1:
      out = _matmul_attention(qg, keys, values, valid, dt, cached=kv is not None,
                              attention_rows=self.attention_rows)
    elif (self.pallas_decode and t == 1 and kv is not None and heads_major
          and pallas_supported(keys.shape[2])):
      out = _pallas_decode_attention(q, keys, values, slots)
    else:
      out = _einsum_attention(qg, keys, values, valid, dt, heads_major)
    out = nn.DenseGeneral(
        cfg.hidden_size, axis=(-2, -1), use_bias=cfg.o_bias, dtype=dt, param_dtype=pdt,
        name="o_proj", kernel_init=logical_init(_KERNEL_INIT, ("heads", "head_dim", "embed")),
        bias_init=logical_init(nn.initializers.zeros, ("embed",)))(out.reshape(b * t, h, d))
    return out.reshape(b, t, -1), new_kv

  def _fused_qkv(self, x_flat, b, t):
    """Queries, keys and values from one [E, KVH, G + 2, D] product (see models.fused)."""
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    kvh, d = cfg.num_kv_heads, cfg.head_dim
    g = cfg.num_heads // kvh
    axes = ("kv_heads", "qkv", "head_dim")
    qkv = nn.DenseGeneral(
        (kvh, g + 2, d), use_bias=cfg.qkv_bias, dtype=dt, param_dtype=pdt, name="qkv_proj",
        kernel_init=logical_init(_KERNEL_INIT, ("embed",) + axes),
        bias_init=logical_init(nn.initializers.zeros, axes))(x_flat).reshape(b, t, kvh, g + 2, d)
    return (qkv[:, :, :, :g].reshape(b, t, cfg.num_heads, d), qkv[:, :, :, g],
            qkv[:, :, :, g + 1])


class MLP(nn.Module):
  cfg: DecoderConfig
  fused: bool = False       # one gate_up_proj (ragjax.models.fused) instead of gate/up_proj

  @nn.compact
  def __call__(self, x):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)

    def dense(name, feats, axes):
      kind = nn.Dense if isinstance(feats, int) else nn.DenseGeneral
      return kind(feats, use_bias=cfg.mlp_bias, dtype=dt, param_dtype=pdt, name=name,
                  kernel_init=logical_init(_KERNEL_INIT, axes),
                  bias_init=logical_init(nn.initializers.zeros, axes[1:]))

    lead, x = x.shape[:-1], tokens_flat(x)
    m = cfg.intermediate_size
    if self.fused:
      gate_up = dense("gate_up_proj", (2, m), ("embed", "gate_up", "mlp"))(x)
      gate, up = gate_up[:, 0], gate_up[:, 1]
    else:
      gate = dense("gate_proj", m, ("embed", "mlp"))(x)
      up = dense("up_proj", m, ("embed", "mlp"))(x)
    out = dense("down_proj", cfg.hidden_size, ("mlp", "embed"))(nn.silu(gate) * up)
    return out.reshape(lead + out.shape[1:])


class DecoderLayer(nn.Module):
  cfg: DecoderConfig
  attend_length: Optional[int] = None
  attention_rows: int = 0
  cpu_kernel: bool = False
  fused: bool = False
  pallas_decode: bool = False

  @nn.compact
  def __call__(self, x, rope, attention_mask, kv, cache_start, layer=0):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    norm = lambda name: RMSNorm(cfg.rms_norm_eps, dt, pdt, name=name)
    attn, new_kv = Attention(cfg, self.attend_length, self.attention_rows, self.cpu_kernel,
                             self.fused, self.pallas_decode, name="self_attn")(
        norm("input_layernorm")(x), rope, attention_mask, kv, cache_start, layer)
    x = x + attn
    x = x + MLP(cfg, self.fused, name="mlp")(norm("post_attention_layernorm")(x))
    return x, new_kv


def remat_policy(cfg: DecoderConfig):
  """The jax.checkpoint policy of `cfg.remat_policy`: None saves nothing but the layer's
  input; "dots" saves every matmul without batch dimensions (the projections; the
  attention's batched score and mix products are recomputed, so no [T, T] block is kept)."""
  return {"full": None,
          "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}[cfg.remat_policy]


class _ScanLayer(nn.Module):
  """Adapter so nn.scan carries (x, whole cache, layer index) through the layers."""
  cfg: DecoderConfig
  attend_length: Optional[int] = None
  attention_rows: int = 0
  cpu_kernel: bool = False
  fused: bool = False
  pallas_decode: bool = False

  @nn.compact
  def __call__(self, carry, rope, attention_mask, cache_start):
    x, kv, i = carry
    layer = DecoderLayer
    if self.cfg.remat:
      layer = nn.remat(DecoderLayer, prevent_cse=False, policy=remat_policy(self.cfg))
    x, new_kv = layer(self.cfg, self.attend_length, self.attention_rows, self.cpu_kernel,
                      self.fused, self.pallas_decode, name="layer")(
        x, rope, attention_mask, kv, cache_start, i)
    return (x, new_kv, i + 1), None


def unstack_layers(params: dict, num_layers: int) -> dict:
  """A `scan_layers` params tree (one stacked `layers/layer` subtree, [L, ...] leaves) in the
  unrolled layout (`layers_0` .. `layers_{L-1}`), the same values: what a config with
  `scan_layers=False` runs.  Any other tree comes back as it is."""
  if "layers" not in params:
    return params
  out = {k: v for k, v in params.items() if k != "layers"}
  stacked = params["layers"]["layer"]
  for i in range(num_layers):
    out[f"layers_{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)
  return out


class Decoder(nn.Module):
  """Causal LM (`head="lm"`) or value model (`head="value"`, one scalar per token).

  `attend_length` (cached decoding only): queries attend to the first N cache slots, which
  must hold every position in use; None attends to the whole cache.  `attention_rows`
  (cached, several tokens per row: prefill, extend): compute the attention that many rows at a
  time (`lax.map`), so one chunk's score tensor stays in the CPU's caches; 0 = all rows at once
  (what a sharded batch needs).  `cpu_kernel` (cached, per-layer float32 cache, XLA's CPU
  backend, unsharded): the attention runs in `ragjax.models.cpu_attention`'s kernel, which
  reads each row's keys and values only up to its own slot.  `fused`: the params are in the
  fused-projection layout of `ragjax.models.fused` (one qkv_proj and one gate_up_proj per
  layer; what a sampler may run on), not transformers' layout.  `pallas_decode` (cached, one
  token per row, per-layer cache of a power-of-two width): the attention runs in
  `ragjax.models.pallas_decode`'s kernel, over each row's own length.
  """
  cfg: DecoderConfig
  head: str = "lm"
  attend_length: Optional[int] = None
  attention_rows: int = 0
  cpu_kernel: bool = False
  fused: bool = False
  pallas_decode: bool = False

  @nn.compact
  def __call__(self, tokens, positions=None, attention_mask=None, cache: Optional[Cache] = None,
               cache_start=None, return_hidden=False, inputs_embeds=None):
    """`return_hidden`: True returns the final-normed hidden states, "residual" the residual
    stream after the last layer (no final norm); `inputs_embeds` [B, T, E] replaces the token
    embedding (the residual stream entering the first layer).  Together they run a decoder in
    two parts over slices of its layers (`ragjax.models.lora.adapter_hidden`)."""
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
    x = embed(tokens) if inputs_embeds is None else inputs_embeds.astype(dt)
    rope = rope_tables(positions, rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling),
                       dt)

    new_cache = None
    if cfg.scan_layers:
      if cache is not None and not is_stacked(cache["k"]):
        raise ValueError("scan_layers carries a stacked [L, B, S, KVH, D] cache; this one is "
                         "per-layer (build it with init_cache on the same config)")
      scan = nn.scan(_ScanLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                     in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                     length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
      kv = None if cache is None else (cache["k"], cache["v"])
      (x, new_kv, _), _ = scan(cfg, self.attend_length, self.attention_rows, self.cpu_kernel,
                               self.fused, self.pallas_decode, name="layers")(
          (x, kv, jnp.int32(0)), rope, attention_mask, cache_start)
      if cache is not None:
        new_cache = {"k": new_kv[0], "v": new_kv[1]}
    else:
      layer_cls = (nn.remat(DecoderLayer, policy=remat_policy(cfg)) if cfg.remat
                   else DecoderLayer)
      stacked = cache is not None and is_stacked(cache["k"])
      new_k, new_v = [], []
      for i in range(cfg.num_layers):
        if cache is None:
          kv = None
        elif stacked:
          kv = (cache["k"], cache["v"]) if i == 0 else kv
        else:
          kv = (cache["k"][i], cache["v"][i])
        x, kv = layer_cls(cfg, self.attend_length, self.attention_rows, self.cpu_kernel,
                          self.fused, self.pallas_decode, name=f"layers_{i}")(
            x, rope, attention_mask, kv, cache_start, i)
        if kv is not None and not stacked:
          new_k.append(kv[0])
          new_v.append(kv[1])
      if cache is not None:
        new_cache = ({"k": kv[0], "v": kv[1]} if stacked
                     else {"k": tuple(new_k), "v": tuple(new_v)})

    if return_hidden == "residual":
      return x, new_cache
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


def param_logical_axes(cfg: DecoderConfig, head: str = "lm", fused: bool = False):
  """A tree of PartitionSpecs of logical axis names, shaped like the params (`fused`: the
  fused-projection layout of ragjax.models.fused)."""
  abstract = jax.eval_shape(lambda: Decoder(cfg, head=head, fused=fused).init(
      jax.random.PRNGKey(0), dummy_inputs()))
  return nn.get_partition_spec(abstract)["params"]


def abstract_params(cfg: DecoderConfig, head: str = "lm", fused: bool = False):
  abstract = jax.eval_shape(lambda: Decoder(cfg, head=head, fused=fused).init(
      jax.random.PRNGKey(0), dummy_inputs()))
  return nn.unbox(abstract)["params"]
