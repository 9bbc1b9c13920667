"""The decoder's KV cache: its two layouts and the row edits the sampler makes on either.

The layout follows the layer loop of the model config:

* `scan_layers=True` (the paper-size configs): one stacked array per k / v,
  `[L, B, S, KVH, D]`.  `nn.scan` carries it through the layers and each layer writes its
  slice in place with one scatter (no copy of a layer's slice out and back per step).
* `scan_layers=False` (tiny configs, the embedded default, the benchmarks): a tuple of L
  heads-major arrays per k / v, each `[B, KVH, S, D]`.  Each layer attends its own array
  whole, so a decode step reads keys without first copying a slice of a larger array; on a
  CPU that copy costs 2.5-4.4x the attention itself (`python -m ragjax.bench.decode_attention`).
  The sampler keeps this cache only as wide as its rows need (`grow` at a few widths) instead
  of slicing a window out of a full-length one.

Both are `{"k": ..., "v": ...}` pytrees; every function below takes either, telling them
apart by the leaves' rank (5: stacked, 4: per-layer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig, as_dtype

Cache = dict

STACKED_AXES = ("layers", "batch", "cache_length", "kv_heads", "head_dim")
PER_LAYER_AXES = ("batch", "kv_heads", "cache_length", "head_dim")
SLOT_AXIS = 2      # the cache slot's axis in both layouts


def init_cache(cfg: DecoderConfig, batch: int, length: int, dtype=None) -> Cache:
  """An empty KV cache in the config's layout; bf16 on accelerators is the usual `dtype`."""
  dtype = as_dtype(dtype or cfg.dtype)
  kvh, d = cfg.num_kv_heads, cfg.head_dim
  if cfg.scan_layers:
    shape = (cfg.num_layers, batch, length, kvh, d)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}
  zeros = lambda: tuple(jnp.zeros((batch, kvh, length, d), dtype)
                        for _ in range(cfg.num_layers))
  return {"k": zeros(), "v": zeros()}


def is_stacked(part) -> bool:
  """True for a stacked array (or a cache's "k" / "v" entry that is one), False for a
  per-layer array or tuple of them."""
  return not isinstance(part, (tuple, list)) and part.ndim == 5


def logical_axes(leaf) -> tuple[str, ...]:
  """The logical axis names of one cache array (for the sharding rules)."""
  return STACKED_AXES if is_stacked(leaf) else PER_LAYER_AXES


def batch_axis(leaf) -> int:
  return 1 if is_stacked(leaf) else 0


def width(cache: Cache) -> int:
  """Slots the cache holds now (a per-layer cache can be narrower than its rows' history)."""
  return jax.tree.leaves(cache)[0].shape[SLOT_AXIS]


def grow(cache: Cache, slots: int) -> Cache:
  """The cache widened to `slots` (new slots empty); existing slots keep their values."""
  def pad(x):
    widths = [(0, 0)] * x.ndim
    widths[SLOT_AXIS] = (0, slots - x.shape[SLOT_AXIS])
    return jnp.pad(x, widths)
  return jax.tree.map(pad, cache)


def concat_rows(caches) -> Cache:
  """One cache holding the rows of `caches` in order, at the widest one's width."""
  slots = max(width(c) for c in caches)
  caches = [grow(c, slots) if width(c) < slots else c for c in caches]
  return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=batch_axis(xs[0])), *caches)


def take_rows(cache: Cache, rows) -> Cache:
  """Row b of the result is row rows[b] of the cache."""
  return jax.tree.map(lambda x: jnp.take(x, rows, axis=batch_axis(x)), cache)


def repeat_rows(cache: Cache, times: int) -> Cache:
  """Each row repeated `times` times in place (prompt-major samples of one prefill)."""
  return jax.tree.map(lambda x: jnp.repeat(x, times, axis=batch_axis(x)), cache)


def put_rows(cache: Cache, dst, fresh: Cache, src) -> Cache:
  """Row dst[i] takes row src[i] of `fresh`, whose cache may be narrower (only its first
  slots are written); dst[i] == batch size is dropped."""
  def put(x, y):
    y = jnp.take(y, src, axis=batch_axis(y)).astype(x.dtype)
    w = y.shape[SLOT_AXIS]
    if is_stacked(x):
      return x.at[:, dst, :w].set(y, mode="drop")
    return x.at[dst, :, :w].set(y, mode="drop")
  return jax.tree.map(put, cache, fresh)
