"""HF checkpoint import/export for the decoder.

Loading reads one tensor at a time from memory-mapped safetensors, converts it to the ragjax
layout, casts to `param_dtype` and places it with its target sharding, so a 7B model never has
a second full host copy.  Every expected tensor is checked by name and shape first, so a
mismatched checkpoint fails before anything is loaded, naming the tensor and both shapes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Iterable, Optional

import jax
import numpy as np

from ragjax.models.model_config import (DecoderConfig, as_dtype, decoder_config_from_hf,
                                  decoder_config_to_hf, read_hf_config)
from ragjax.models.gguf_io import (GGUF_SUFFIX, check_gguf, gguf_hf_config, gguf_tensors,
                                   gguf_tokenizer, is_gguf)
from ragjax.models.safetensors_io import CheckpointError, SafetensorsReader, write_safetensors

# Buffers some checkpoints carry that are not parameters.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclasses.dataclass(frozen=True)
class TensorMap:
  """One HF tensor <-> one ragjax leaf, with the layout change both ways."""
  hf_name: str
  path: tuple[str, ...]                      # path in the ragjax params tree (layer 0 form)
  hf_shape: tuple[int, ...]
  to_ragjax: Callable[[np.ndarray], np.ndarray]
  to_hf: Callable[[np.ndarray], np.ndarray]
  layer: Optional[int] = None


def _linear(out_shape_fn):
  """HF Linear weight [out, in] <-> ragjax kernel [in, *out_shape]."""
  return (lambda w: w.T.reshape(out_shape_fn(w.T.shape[0])),
          lambda k: k.reshape(k.shape[0], -1).T)


def decoder_tensor_maps(cfg: DecoderConfig) -> list[TensorMap]:
  """Every tensor an HF Llama/Qwen2 checkpoint of this config must hold."""
  e, m, h, kvh, d, v = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
                        cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size)
  ident = (lambda x: x, lambda x: x)
  maps = [TensorMap("model.embed_tokens.weight", ("embed_tokens", "embedding"), (v, e), *ident),
          TensorMap("model.norm.weight", ("norm", "scale"), (e,), *ident)]
  if not cfg.tie_word_embeddings:
    maps.append(TensorMap("lm_head.weight", ("lm_head", "kernel"), (v, e), lambda w: w.T,
                          lambda k: k.T))
  for i in range(cfg.num_layers):
    p = f"model.layers.{i}."
    lay = lambda *rest: ("LAYER",) + rest  # noqa: E731
    heads = lambda n: (lambda w: w.T.reshape(e, n, d), lambda k: k.reshape(e, n * d).T)  # noqa
    bias = lambda n: (lambda b: b.reshape(n, d), lambda b: b.reshape(n * d))  # noqa
    layer = [
        TensorMap(p + "input_layernorm.weight", lay("input_layernorm", "scale"), (e,), *ident),
        TensorMap(p + "post_attention_layernorm.weight", lay("post_attention_layernorm", "scale"),
                  (e,), *ident),
        TensorMap(p + "self_attn.q_proj.weight", lay("self_attn", "q_proj", "kernel"), (h * d, e),
                  *heads(h)),
        TensorMap(p + "self_attn.k_proj.weight", lay("self_attn", "k_proj", "kernel"),
                  (kvh * d, e), *heads(kvh)),
        TensorMap(p + "self_attn.v_proj.weight", lay("self_attn", "v_proj", "kernel"),
                  (kvh * d, e), *heads(kvh)),
        TensorMap(p + "self_attn.o_proj.weight", lay("self_attn", "o_proj", "kernel"), (e, h * d),
                  lambda w: w.T.reshape(h, d, e), lambda k: k.reshape(h * d, e).T),
        TensorMap(p + "mlp.gate_proj.weight", lay("mlp", "gate_proj", "kernel"), (m, e),
                  lambda w: w.T, lambda k: k.T),
        TensorMap(p + "mlp.up_proj.weight", lay("mlp", "up_proj", "kernel"), (m, e),
                  lambda w: w.T, lambda k: k.T),
        TensorMap(p + "mlp.down_proj.weight", lay("mlp", "down_proj", "kernel"), (e, m),
                  lambda w: w.T, lambda k: k.T),
    ]
    if cfg.qkv_bias:
      layer += [
          TensorMap(p + "self_attn.q_proj.bias", lay("self_attn", "q_proj", "bias"), (h * d,),
                    *bias(h)),
          TensorMap(p + "self_attn.k_proj.bias", lay("self_attn", "k_proj", "bias"), (kvh * d,),
                    *bias(kvh)),
          TensorMap(p + "self_attn.v_proj.bias", lay("self_attn", "v_proj", "bias"), (kvh * d,),
                    *bias(kvh)),
      ]
    if cfg.o_bias:
      layer.append(TensorMap(p + "self_attn.o_proj.bias", lay("self_attn", "o_proj", "bias"),
                             (e,), *ident))
    if cfg.mlp_bias:
      for name, size in (("gate_proj", m), ("up_proj", m), ("down_proj", e)):
        layer.append(TensorMap(p + f"mlp.{name}.bias", lay("mlp", name, "bias"), (size,), *ident))
    maps += [dataclasses.replace(t, layer=i) for t in layer]
  return maps


def _leaf_path(cfg: DecoderConfig, t: TensorMap) -> tuple[str, ...]:
  if t.layer is None:
    return t.path
  rest = t.path[1:]
  return ("layers", "layer") + rest if cfg.scan_layers else (f"layers_{t.layer}",) + rest


def check_tensors(maps: Iterable[TensorMap], names: Iterable[str], shape_of: Callable,
                  allow_extra: Iterable[str] = ()) -> None:
  """Raises CheckpointError naming every missing, extra or mis-shaped tensor."""
  maps = list(maps)
  expected = {t.hf_name: t.hf_shape for t in maps}
  present = {n for n in names if not n.endswith(_IGNORED_SUFFIXES)}
  problems = []
  for name in sorted(expected.keys() - present):
    problems.append(f"missing tensor {name!r} (expected shape {expected[name]})")
  for name in sorted(present - expected.keys() - set(allow_extra)):
    problems.append(f"unexpected tensor {name!r} with shape {tuple(shape_of(name))}")
  for name in sorted(expected.keys() & present):
    got = tuple(shape_of(name))
    if got != tuple(expected[name]):
      problems.append(f"tensor {name!r} has shape {got}, expected {tuple(expected[name])}")
  if problems:
    shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
    raise CheckpointError("checkpoint does not match the model config:\n  " + "\n  ".join(shown))


def _set(tree: dict, path: tuple[str, ...], value) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _get(tree: dict, path: tuple[str, ...]):
  for key in path:
    tree = tree[key]
  return tree


def params_from_tensors(cfg: DecoderConfig, get: Callable[[str], np.ndarray], names,
                        shape_of: Callable, shardings=None) -> dict:
  """Builds the params tree leaf by leaf from a tensor getter, placing each leaf as it goes.

  `shardings` (optional) is a tree of `jax.sharding.Sharding` shaped like the params; without it
  leaves go to the default device.
  """
  maps = decoder_tensor_maps(cfg)
  allow = ("lm_head.weight",) if cfg.tie_word_embeddings else ()
  check_tensors(maps, names, shape_of, allow_extra=allow)
  dtype = as_dtype(cfg.param_dtype)
  params: dict = {}

  def place(path, host):
    target = None if shardings is None else _get(shardings, path)
    return jax.device_put(host, target) if target is not None else jax.device_put(host)

  by_path: dict[tuple, list[TensorMap]] = {}
  for t in maps:
    by_path.setdefault(_leaf_path(cfg, t), []).append(t)
  for path, group in by_path.items():
    if cfg.scan_layers and path[0] == "layers":
      host = np.stack([np.asarray(t.to_ragjax(get(t.hf_name)), dtype) for t in
                       sorted(group, key=lambda t: t.layer)])
    else:
      (t,) = group
      host = np.asarray(t.to_ragjax(get(t.hf_name)), dtype)
    _set(params, path, place(path, host))
    del host
  return params


def load_decoder(model_dir: str, *, shardings=None, **overrides) -> tuple[DecoderConfig, dict]:
  """Loads an HF Llama/Qwen2 directory (its config.json wins over any preset), or a `.gguf`
  file through transformers' GGUF reader (ragjax.models.gguf_io).

  `overrides` set ragjax-only fields (dtype, param_dtype, scan_layers, remat).  `shardings`
  may be a tree of shardings or a callable `cfg -> tree` (e.g. from `ragjax.parallel`).
  """
  if is_gguf(model_dir):
    hf_cfg, tensors = gguf_tensors(model_dir)
    cfg = decoder_config_from_hf(hf_cfg, **overrides)
    if callable(shardings):
      shardings = shardings(cfg)
    return cfg, params_from_tensors(cfg, tensors.__getitem__, tensors.keys(),
                                    lambda n: tensors[n].shape, shardings)
  cfg = decoder_config_of(model_dir, **overrides)
  if callable(shardings):
    shardings = shardings(cfg)
  reader = SafetensorsReader(model_dir)
  params = params_from_tensors(cfg, reader.get, reader.keys(), reader.shape, shardings)
  return cfg, params


def check_decoder_dir(model_dir: str) -> None:
  """Reads what loading `model_dir` starts with (config.json, the safetensors headers, or a
  GGUF file's metadata; no weights), so a missing or damaged checkpoint is refused before any
  other work."""
  if is_gguf(model_dir):
    check_gguf(model_dir)
    decoder_config_of(model_dir)
    return
  if os.path.isfile(model_dir):
    raise ValueError(f"checkpoint {model_dir!r} is a file: give an HF directory (config.json, "
                     f"*.safetensors) or a {GGUF_SUFFIX} file")
  if not os.path.isdir(model_dir):
    raise FileNotFoundError(f"checkpoint directory {model_dir!r} does not exist")
  decoder_config_of(model_dir)
  SafetensorsReader(model_dir)


def decoder_config_of(model_dir: str, **overrides) -> DecoderConfig:
  """The DecoderConfig of `model_dir`'s config.json (or a GGUF file's metadata); a missing or
  wrong field is an error naming the file."""
  if is_gguf(model_dir):
    try:
      return decoder_config_from_hf(gguf_hf_config(model_dir), **overrides)
    except KeyError as e:
      raise ValueError(f"{model_dir}: its metadata gives no {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
      if model_dir in str(e):
        raise
      raise ValueError(f"{model_dir}: {e}") from None
  path = os.path.join(model_dir, "config.json")
  try:
    return decoder_config_from_hf(read_hf_config(model_dir), **overrides)
  except KeyError as e:
    raise ValueError(f"{path} has no {e.args[0]!r} field") from None
  except (TypeError, ValueError) as e:
    if path in str(e):
      raise
    raise ValueError(f"{path}: {e}") from None


def params_from_torch_state_dict(cfg: DecoderConfig, state_dict, shardings=None) -> dict:
  """Converts an in-memory transformers state_dict (tests, notebooks) to ragjax params."""
  tensors = {k: v.detach().float().cpu().numpy() for k, v in state_dict.items()}
  return params_from_tensors(cfg, tensors.__getitem__, tensors.keys(),
                             lambda n: tensors[n].shape, shardings)


def params_to_hf_tensors(cfg: DecoderConfig, params: dict, dtype=None) -> dict[str, np.ndarray]:
  """The HF state dict (numpy) of a params tree."""
  out = {}
  for t in decoder_tensor_maps(cfg):
    leaf = np.asarray(jax.device_get(_get(params, _leaf_path(cfg, t))))
    if cfg.scan_layers and t.layer is not None:
      leaf = leaf[t.layer]
    arr = np.ascontiguousarray(t.to_hf(leaf))
    out[t.hf_name] = arr.astype(as_dtype(dtype)) if dtype is not None else arr
  return out


def check_finite(where: str, tensors: dict[str, np.ndarray]) -> None:
  """A poisoned policy is never exported: a ValueError naming the first non-finite tensor."""
  for name, arr in tensors.items():
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
      raise ValueError(f"{where}: tensor {name} holds {int((~np.isfinite(arr)).sum())} "
                       f"non-finite values; refusing to export non-finite weights")


def save_decoder(out_dir: str, cfg: DecoderConfig, params: dict, *, dtype=None,
                 tokenizer=None, max_shard_bytes: int = 5 * 2**30) -> None:
  """Writes an HF directory (safetensors, sharded above `max_shard_bytes`, plus config.json)."""
  tensors = params_to_hf_tensors(cfg, params, dtype)
  check_finite(out_dir, tensors)
  os.makedirs(out_dir, exist_ok=True)
  hf_cfg = decoder_config_to_hf(cfg)
  if dtype is not None:
    hf_cfg["torch_dtype"] = hf_cfg["dtype"] = np.dtype(as_dtype(dtype)).name
  shards, current, size = [], {}, 0
  for name, arr in tensors.items():
    if current and size + arr.nbytes > max_shard_bytes:
      shards.append(current)
      current, size = {}, 0
    current[name] = arr
    size += arr.nbytes
  shards.append(current)
  if len(shards) == 1:
    write_safetensors(os.path.join(out_dir, "model.safetensors"), shards[0])
  else:
    weight_map = {}
    for i, shard in enumerate(shards):
      fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      write_safetensors(os.path.join(out_dir, fname), shard)
      weight_map.update({k: fname for k in shard})
    total = sum(a.nbytes for a in tensors.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
      json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(hf_cfg, f, indent=2)
  if tokenizer is not None:
    tokenizer.save_pretrained(out_dir)


# tokenizer_config classes that mean "exactly what tokenizer.json says".
_FILE_DEFINED_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(model_dir: str):
  """The checkpoint's own tokenizer, via transformers (no hub access); a GGUF file's is the one
  transformers builds from its metadata.

  A directory whose tokenizer_config declares a plain tokenizers-file class (ragjax's world
  tokenizer, exported next to a policy) is loaded as that class: AutoTokenizer would see the
  qwen2 config.json and build Qwen2Tokenizer, which replaces the file's pre-tokenizer with
  Qwen2's (digits one by one), silently changing the token ids the policy was trained on."""
  if is_gguf(model_dir):
    return gguf_tokenizer(model_dir)
  from transformers import AutoTokenizer, PreTrainedTokenizerFast
  declared = None
  path = os.path.join(model_dir, "tokenizer_config.json")
  if os.path.exists(path):
    with open(path) as f:
      declared = json.load(f).get("tokenizer_class")
  if declared in _FILE_DEFINED_TOKENIZERS:
    return PreTrainedTokenizerFast.from_pretrained(model_dir, local_files_only=True)
  return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
