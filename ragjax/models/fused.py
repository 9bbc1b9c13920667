"""The fused-projection layout of decoder params: what `Decoder(cfg, fused=True)` runs on.

Params on disk, in training, in LoRA and in checkpoints keep transformers' layout (separate
`q_proj` / `k_proj` / `v_proj` and `gate_proj` / `up_proj`).  A sampler may hold a fused copy,
built from those whenever its weights are set, so that a decode step runs one matmul for the
queries, keys and values and one for the MLP's gate and up projections instead of five: on
an accelerator each is a kernel launch over a small [B, E] input, and a decode step is
mostly such launches (issue 44).

Layout, per layer (leading axes such as `nn.scan`'s layer axis are kept):

* `self_attn/qkv_proj`: kernel [E, KVH, G + 2, D], bias [KVH, G + 2, D]: for KV head j, its
  G query heads (query heads j*G .. j*G + G - 1, as grouped-query attention pairs them), then
  its key, then its value.  Grouped by KV head, the tensor axis splits it where it splits the
  KV heads, and every device keeps its own heads' queries, keys and values together.
* `mlp/gate_up_proj`: kernel [E, 2, M], bias [2, M]: the gate, then the up projection.

`shared_fused_copy` builds the copy once per weights: every sampler over the same params (a
rollout engine and an eval engine after a weight sync, a server's samplers for different
budgets) holds the same fused arrays, dropped with those weights.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig


def _group(x, cfg: DecoderConfig, heads: int, axis: int):
  """[..., heads, D] (heads at `axis`) -> [..., KVH, heads // KVH, D]."""
  shape = x.shape[:axis] + (cfg.num_kv_heads, heads // cfg.num_kv_heads) + x.shape[axis + 1:]
  return x.reshape(shape)


def fuse_attention(cfg: DecoderConfig, attn: dict) -> dict:
  """`self_attn` params with q/k/v_proj replaced by `qkv_proj` (o_proj and anything else kept)."""
  q, k, v = attn["q_proj"], attn["k_proj"], attn["v_proj"]
  h, kvh = cfg.num_heads, cfg.num_kv_heads
  out = {name: p for name, p in attn.items() if name not in ("q_proj", "k_proj", "v_proj")}
  fused = {}
  for name, axis in (("kernel", -2), ("bias", -2)):
    if name not in q:
      continue
    parts = [_group(q[name], cfg, h, q[name].ndim + axis),
             _group(k[name], cfg, kvh, k[name].ndim + axis),
             _group(v[name], cfg, kvh, v[name].ndim + axis)]
    fused[name] = jnp.concatenate(parts, axis=-2)
  out["qkv_proj"] = fused
  return out


def fuse_mlp(mlp: dict) -> dict:
  """`mlp` params with gate_proj and up_proj stacked into `gate_up_proj`."""
  gate, up = mlp["gate_proj"], mlp["up_proj"]
  out = {name: p for name, p in mlp.items() if name not in ("gate_proj", "up_proj")}
  out["gate_up_proj"] = {name: jnp.stack([gate[name], up[name]], axis=gate[name].ndim - 1)
                         for name in gate}
  return out


def fuse_projections(cfg: DecoderConfig, params: dict) -> dict:
  """The fused layout of HF-layout `params` (per-layer `layers_i` or scanned `layers/layer`).
  Embedding, norms, o_proj, down_proj and the heads are the same arrays, not copies."""
  def layer(p):
    return {**p, "self_attn": fuse_attention(cfg, p["self_attn"]), "mlp": fuse_mlp(p["mlp"])}
  out = dict(params)
  if "layers" in params:
    out["layers"] = {**params["layers"], "layer": layer(params["layers"]["layer"])}
  for i in range(cfg.num_layers):
    if f"layers_{i}" in params:
      out[f"layers_{i}"] = layer(params[f"layers_{i}"])
  return out


# (id of the weights' first query kernel, config, placement) -> (weakref to that kernel, copy)
_SHARED: dict[tuple, tuple] = {}


def _first_query_kernel(params):
  layer = params["layers"]["layer"] if "layers" in params else params["layers_0"]
  return layer["self_attn"]["q_proj"]["kernel"]


def shared_fused_copy(cfg: DecoderConfig, params: dict, place: Optional[Callable] = None,
                      placement=None) -> dict:
  """`fuse_projections(cfg, params)`, then `place` (e.g. sharding), built once per params
  tree (by the identity of its first query kernel) and `placement` (what `place` targets)."""
  leaf = _first_query_kernel(params)
  key = (id(leaf), cfg, placement)
  hit = _SHARED.get(key)
  if hit is not None and hit[0]() is leaf:
    return hit[1]
  fused = fuse_projections(cfg, params)
  if place is not None:
    fused = place(fused)
  _SHARED[key] = (weakref.ref(leaf, lambda _, key=key: _SHARED.pop(key, None)), fused)
  return fused
