"""The two KV-cache layouts hold the same keys, and the row edits treat them alike."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.models import kv_cache
from ragjax.models.decoder import Decoder, init_params
from ragjax.models.presets import get_preset


def _filled(cfg, batch, length, seed):
  """(per-layer cache, the same values stacked)."""
  rng = np.random.default_rng(seed)
  shape = (cfg.num_layers, batch, cfg.num_kv_heads, length, cfg.head_dim)
  k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
  per_layer = {"k": tuple(jnp.asarray(x) for x in k), "v": tuple(jnp.asarray(x) for x in v)}
  stacked = {"k": jnp.asarray(k.transpose(0, 1, 3, 2, 4)), "v": jnp.asarray(v.transpose(0, 1, 3, 2, 4))}
  return per_layer, stacked


def _as_per_layer(cache):
  if not kv_cache.is_stacked(cache["k"]):
    return {n: np.stack([np.asarray(x) for x in cache[n]]) for n in ("k", "v")}
  return {n: np.asarray(cache[n]).transpose(0, 1, 3, 2, 4) for n in ("k", "v")}


def test_init_cache_layout_follows_the_layer_loop():
  cfg = get_preset("tiny")
  per_layer = kv_cache.init_cache(cfg, 3, 16)
  stacked = kv_cache.init_cache(cfg.replace(scan_layers=True), 3, 16)
  assert stacked["k"].shape == (cfg.num_layers, 3, 16, cfg.num_kv_heads, cfg.head_dim)
  assert [x.shape for x in per_layer["k"]] == [(3, cfg.num_kv_heads, 16, cfg.head_dim)] * cfg.num_layers
  assert kv_cache.logical_axes(stacked["k"])[1] == "batch"
  assert kv_cache.logical_axes(per_layer["k"][0])[0] == "batch"


def test_row_edits_agree_across_layouts():
  cfg = get_preset("tiny")
  per_layer, stacked = _filled(cfg, 4, 12, seed=0)
  fresh_pl, fresh_st = _filled(cfg, 2, 5, seed=1)          # narrower: a refill's prompts
  rows = jnp.asarray([3, 3, 0, 1])
  dst, src = jnp.asarray([2, 4]), jnp.asarray([1, 0])     # 4 == batch size: dropped
  for fn in (lambda c, f: kv_cache.take_rows(c, rows),
             lambda c, f: kv_cache.repeat_rows(c, 2),
             lambda c, f: kv_cache.put_rows(c, dst, f, src)):
    a, b = _as_per_layer(fn(per_layer, fresh_pl)), _as_per_layer(fn(stacked, fresh_st))
    np.testing.assert_array_equal(a["k"], b["k"])
    np.testing.assert_array_equal(a["v"], b["v"])
  put = _as_per_layer(kv_cache.put_rows(per_layer, dst, fresh_pl, src))
  before = _as_per_layer(per_layer)
  np.testing.assert_array_equal(put["k"][:, 2, :, :5], _as_per_layer(fresh_pl)["k"][:, 1])
  np.testing.assert_array_equal(put["k"][:, 2, :, 5:], before["k"][:, 2, :, 5:])
  np.testing.assert_array_equal(put["k"][:, [0, 1, 3]], before["k"][:, [0, 1, 3]])


def test_concat_rows_widens_to_the_widest():
  cfg = get_preset("tiny")
  a, _ = _filled(cfg, 2, 8, seed=2)
  b, _ = _filled(cfg, 3, 12, seed=3)
  both = kv_cache.concat_rows([a, b])
  assert kv_cache.width(both) == 12 and both["k"][0].shape[0] == 5
  got, want_a, want_b = _as_per_layer(both), _as_per_layer(a), _as_per_layer(b)
  np.testing.assert_array_equal(got["v"][:, :2, :, :8], want_a["v"])
  assert not got["v"][:, :2, :, 8:].any()
  np.testing.assert_array_equal(got["v"][:, 2:], want_b["v"])


def test_scan_decoder_refuses_a_per_layer_cache():
  cfg = get_preset("tiny")
  params = init_params(cfg.replace(scan_layers=True), jax.random.PRNGKey(0))
  cache = kv_cache.init_cache(cfg, 1, 8)
  with pytest.raises(ValueError, match="per-layer"):
    Decoder(cfg.replace(scan_layers=True)).apply(
        {"params": params}, jnp.zeros((1, 1), jnp.int32), cache=cache,
        cache_start=jnp.zeros((1,), jnp.int32))
