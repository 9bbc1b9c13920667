"""Typed model configs and their mapping from HF `config.json` files.

The decoder config covers the Llama-3.x and Qwen2/Qwen2.5 families; the encoder config covers
BERT-family sentence encoders (MiniLM, e5, bge).  A checkpoint's own `config.json` always wins
over a preset: presets only name shapes for random-weight benchmarks and for configs that
refer to a model by name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import jax.numpy as jnp

SUPPORTED_DECODERS = ("qwen2", "llama")
SUPPORTED_ENCODERS = ("bert",)

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("full", "dots")
ATTENTION_IMPLS = ("", "xla", "cudnn")


def as_dtype(name_or_dtype: Any):
  """Accepts 'bfloat16' / jnp.bfloat16 and returns the jnp dtype."""
  if isinstance(name_or_dtype, str):
    if name_or_dtype not in _DTYPES:
      raise ValueError(f"unknown dtype {name_or_dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[name_or_dtype]
  return name_or_dtype


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3.1 frequency scaling ("rope_type": "llama3")."""
  factor: float = 8.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """Shapes and numerics of a Llama / Qwen2 decoder."""
  arch: str = "qwen2"
  vocab_size: int = 151936
  hidden_size: int = 896
  intermediate_size: int = 4864
  num_layers: int = 24
  num_heads: int = 14
  num_kv_heads: int = 2
  head_dim: int = 64
  rope_theta: float = 1_000_000.0
  rope_scaling: Optional[RopeScaling] = None
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = True
  qkv_bias: bool = True
  o_bias: bool = False
  mlp_bias: bool = False
  max_position_embeddings: int = 32768
  bos_token_id: Optional[int] = None
  eos_token_id: Any = None
  pad_token_id: Optional[int] = None
  dtype: str = "float32"          # compute dtype
  param_dtype: str = "float32"    # storage dtype of params
  scan_layers: bool = False       # nn.scan over layers (stacked [L, ...] params)
  remat: bool = False             # rematerialise each layer in the backward pass
  # What a rematerialised layer keeps for its backward pass (decoder.remat_policy): "full" only
  # its input (the forward runs again: 8 instead of 6 FLOPs per weight per token); "dots"
  # also its projections' outputs (only the attention's score and mix products and the
  # elementwise ops run again), at (H + 2 KVH) D + 2 M + 2 E values per token and layer.
  remat_policy: str = "full"
  # Multi-token attention (training, scoring, prefill, extend): "" is ragjax's own; "xla" or
  # "cudnn" is jax.nn.dot_product_attention with that implementation (cuDNN's fused flash
  # attention on NVIDIA GPUs: bfloat16 / float16 only).  A decode step keeps ragjax's.
  attention_impl: str = ""

  def __post_init__(self):
    if self.arch not in SUPPORTED_DECODERS:
      raise ValueError(f"unsupported decoder architecture {self.arch!r}; supported: {SUPPORTED_DECODERS}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
    as_dtype(self.dtype), as_dtype(self.param_dtype)
    if self.remat_policy not in REMAT_POLICIES:
      raise ValueError(f"unknown remat_policy {self.remat_policy!r}; use one of "
                       f"{REMAT_POLICIES}")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"unknown attention_impl {self.attention_impl!r}; use one of "
                       f"{ATTENTION_IMPLS}")
    if self.attention_impl == "cudnn" and self.dtype not in ("bfloat16", "float16"):
      raise ValueError(f"attention_impl 'cudnn' needs dtype bfloat16 or float16, got "
                       f"{self.dtype!r}")

  def replace(self, **kw) -> "DecoderConfig":
    return dataclasses.replace(self, **kw)

  @property
  def eos_ids(self) -> tuple[int, ...]:
    e = self.eos_token_id
    if e is None:
      return ()
    return tuple(e) if isinstance(e, (list, tuple)) else (int(e),)

  def num_params(self) -> int:
    e, m, v, h, kv, d = (self.hidden_size, self.intermediate_size, self.vocab_size,
                         self.num_heads, self.num_kv_heads, self.head_dim)
    attn = e * h * d * 2 + e * kv * d * 2 + (h * d + 2 * kv * d if self.qkv_bias else 0)
    layer = attn + 3 * e * m + 2 * e
    return v * e * (1 if self.tie_word_embeddings else 2) + self.num_layers * layer + e


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """A BERT-family encoder and how it turns token states into one sentence vector."""
  arch: str = "bert"
  vocab_size: int = 30522
  hidden_size: int = 384
  intermediate_size: int = 1536
  num_layers: int = 6
  num_heads: int = 12
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_act: str = "gelu"
  pooling: str = "mean"            # "mean" | "cls"
  normalize: bool = True
  query_prefix: str = ""           # e5: "query: ", bge: "Represent this sentence ..."
  passage_prefix: str = ""         # e5: "passage: "
  max_length: int = 256
  dtype: str = "float32"
  param_dtype: str = "float32"

  def __post_init__(self):
    if self.arch not in SUPPORTED_ENCODERS:
      raise ValueError(f"unsupported encoder architecture {self.arch!r}; supported: {SUPPORTED_ENCODERS}")
    if self.pooling not in ("mean", "cls"):
      raise ValueError(f"pooling must be 'mean' or 'cls', got {self.pooling!r}")
    if self.hidden_act not in ("gelu", "gelu_new", "relu"):
      raise ValueError(f"unsupported hidden_act {self.hidden_act!r}")

  def replace(self, **kw) -> "EncoderConfig":
    return dataclasses.replace(self, **kw)


def _model_type_to_arch(model_type: str, architectures) -> str:
  mt = (model_type or "").lower()
  if mt in ("qwen2",):
    return "qwen2"
  if mt in ("llama",):
    return "llama"
  if mt in ("bert",):
    return "bert"
  raise ValueError(
      f"unsupported architecture model_type={model_type!r} (architectures={architectures}); "
      f"supported decoders: {SUPPORTED_DECODERS}, encoders: {SUPPORTED_ENCODERS}")


def _rope_from_hf(cfg: dict) -> tuple[float, Optional[RopeScaling]]:
  """Reads RoPE settings from either the transformers-4 keys or v5 `rope_parameters`."""
  params = dict(cfg.get("rope_parameters") or {})
  scaling = dict(cfg.get("rope_scaling") or {})
  theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
  merged = {**scaling, **params}
  rope_type = merged.get("rope_type", merged.get("type", "default"))
  if rope_type in (None, "default"):
    return float(theta), None
  if rope_type == "llama3":
    return float(theta), RopeScaling(
        factor=float(merged["factor"]),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(merged.get("original_max_position_embeddings", 8192)))
  raise ValueError(f"unsupported rope_type {rope_type!r}; supported: default, llama3")


def decoder_config_from_hf(cfg: dict, **overrides) -> DecoderConfig:
  """Builds a DecoderConfig from a parsed HF config.json dict."""
  arch = _model_type_to_arch(cfg.get("model_type"), cfg.get("architectures"))
  if arch not in SUPPORTED_DECODERS:
    raise ValueError(f"{arch!r} is an encoder, not a decoder; supported decoders: {SUPPORTED_DECODERS}")
  if cfg.get("use_sliding_window"):
    raise ValueError("use_sliding_window=true is not supported (Qwen2.5 checkpoints leave it off)")
  act = cfg.get("hidden_act", "silu")
  if act != "silu":
    raise ValueError(f"unsupported hidden_act {act!r}; the decoder implements SwiGLU (silu)")
  theta, scaling = _rope_from_hf(cfg)
  heads = int(cfg["num_attention_heads"])
  head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
  fields = dict(
      arch=arch,
      vocab_size=int(cfg["vocab_size"]),
      hidden_size=int(cfg["hidden_size"]),
      intermediate_size=int(cfg["intermediate_size"]),
      num_layers=int(cfg["num_hidden_layers"]),
      num_heads=heads,
      num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
      head_dim=int(head_dim),
      rope_theta=theta,
      rope_scaling=scaling,
      rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
      tie_word_embeddings=bool(cfg.get("tie_word_embeddings", arch == "qwen2")),
      qkv_bias=True if arch == "qwen2" else bool(cfg.get("attention_bias", False)),
      o_bias=False if arch == "qwen2" else bool(cfg.get("attention_bias", False)),
      mlp_bias=bool(cfg.get("mlp_bias", False)),
      max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
      bos_token_id=cfg.get("bos_token_id"),
      eos_token_id=cfg.get("eos_token_id"),
      pad_token_id=cfg.get("pad_token_id"),
  )
  fields.update(overrides)
  return DecoderConfig(**fields)


def encoder_config_from_hf(cfg: dict, **overrides) -> EncoderConfig:
  arch = _model_type_to_arch(cfg.get("model_type"), cfg.get("architectures"))
  if arch != "bert":
    raise ValueError(f"{arch!r} is not an encoder; supported encoders: {SUPPORTED_ENCODERS}")
  fields = dict(
      vocab_size=int(cfg["vocab_size"]),
      hidden_size=int(cfg["hidden_size"]),
      intermediate_size=int(cfg["intermediate_size"]),
      num_layers=int(cfg["num_hidden_layers"]),
      num_heads=int(cfg["num_attention_heads"]),
      max_position_embeddings=int(cfg.get("max_position_embeddings", 512)),
      type_vocab_size=int(cfg.get("type_vocab_size", 2)),
      layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
      hidden_act=cfg.get("hidden_act", "gelu"),
  )
  fields.update(overrides)
  return EncoderConfig(**fields)


def read_hf_config(model_dir: str) -> dict:
  path = os.path.join(model_dir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"no config.json in {model_dir!r}")
  try:
    with open(path, encoding="utf-8") as f:
      out = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path} is not a JSON file: {e}") from None
  if not isinstance(out, dict):
    raise ValueError(f"{path} must hold a JSON object, got {type(out).__name__}")
  return out


def decoder_config_to_hf(cfg: DecoderConfig) -> dict:
  """The HF config.json for an exported decoder (transformers-5 style, readable by v4 too)."""
  rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
  if cfg.rope_scaling is not None:
    rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta,
            **dataclasses.asdict(cfg.rope_scaling)}
  common = dict(
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
      intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
      num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
      head_dim=cfg.head_dim, hidden_act="silu", rms_norm_eps=cfg.rms_norm_eps,
      max_position_embeddings=cfg.max_position_embeddings,
      tie_word_embeddings=cfg.tie_word_embeddings, rope_theta=cfg.rope_theta,
      rope_parameters=rope, rope_scaling=None if cfg.rope_scaling is None else rope,
      bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
      pad_token_id=cfg.pad_token_id, torch_dtype=cfg.param_dtype, dtype=cfg.param_dtype,
  )
  if cfg.arch == "qwen2":
    if cfg.o_bias or cfg.mlp_bias or not cfg.qkv_bias:
      raise ValueError("a qwen2 export needs qkv_bias=True, o_bias=False, mlp_bias=False")
    return dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                use_sliding_window=False, **common)
  if cfg.qkv_bias != cfg.o_bias:
    raise ValueError("a llama export needs the same bias on q/k/v and o (attention_bias)")
  return dict(model_type="llama", architectures=["LlamaForCausalLM"],
              attention_bias=cfg.qkv_bias, mlp_bias=cfg.mlp_bias, **common)
