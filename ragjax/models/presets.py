"""Named decoder shapes for benchmarks and configs.

A preset gives the architecture of a public checkpoint so that random-weight benchmarks and
configs can name it.  When a real checkpoint directory is given, its `config.json` wins
(`resolve_decoder_config`).
"""

from __future__ import annotations

import os
from typing import Optional

from ragjax.models.model_config import DecoderConfig, RopeScaling, decoder_config_from_hf, read_hf_config

_QWEN = dict(arch="qwen2", rope_theta=1_000_000.0, rms_norm_eps=1e-6, qkv_bias=True,
             max_position_embeddings=32768, bos_token_id=151643, eos_token_id=151643,
             head_dim=128)
_LLAMA3 = dict(arch="llama", rope_theta=500_000.0, rms_norm_eps=1e-5, qkv_bias=False,
               vocab_size=128256, max_position_embeddings=131072, bos_token_id=128000,
               eos_token_id=128001, head_dim=128)

PRESETS: dict[str, DecoderConfig] = {
    "qwen2.5-0.5b": DecoderConfig(**{**_QWEN, "head_dim": 64}, vocab_size=151936, hidden_size=896,
                                  intermediate_size=4864, num_layers=24, num_heads=14,
                                  num_kv_heads=2, tie_word_embeddings=True),
    "qwen2.5-1.5b": DecoderConfig(**_QWEN, vocab_size=151936, hidden_size=1536,
                                  intermediate_size=8960, num_layers=28, num_heads=12,
                                  num_kv_heads=2, tie_word_embeddings=True),
    "qwen2.5-3b": DecoderConfig(**_QWEN, vocab_size=151936, hidden_size=2048,
                                intermediate_size=11008, num_layers=36, num_heads=16,
                                num_kv_heads=2, tie_word_embeddings=True),
    "qwen2.5-7b": DecoderConfig(**_QWEN, vocab_size=152064, hidden_size=3584,
                                intermediate_size=18944, num_layers=28, num_heads=28,
                                num_kv_heads=4, tie_word_embeddings=False),
    "llama-3.2-3b": DecoderConfig(**_LLAMA3, hidden_size=3072, intermediate_size=8192,
                                  num_layers=28, num_heads=24, num_kv_heads=8,
                                  tie_word_embeddings=True,
                                  rope_scaling=RopeScaling(32.0, 1.0, 4.0, 8192)),
    "llama-3.1-8b": DecoderConfig(**_LLAMA3, hidden_size=4096, intermediate_size=14336,
                                  num_layers=32, num_heads=32, num_kv_heads=8,
                                  tie_word_embeddings=False,
                                  rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192)),
    # A few-hundred-kilobyte model for tests and the embedded default's smoke runs.
    "tiny": DecoderConfig(arch="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          rope_theta=10_000.0, tie_word_embeddings=True,
                          max_position_embeddings=2048),
}


def get_preset(name: str) -> DecoderConfig:
  key = name.lower()
  if key not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
  return PRESETS[key]


def resolve_decoder_config(name_or_dir: str, **overrides) -> DecoderConfig:
  """A directory with config.json wins; otherwise the name must be a preset."""
  if os.path.isdir(name_or_dir) and os.path.exists(os.path.join(name_or_dir, "config.json")):
    return decoder_config_from_hf(read_hf_config(name_or_dir), **overrides)
  return get_preset(name_or_dir).replace(**overrides) if overrides else get_preset(name_or_dir)


def maybe_preset(name: Optional[str]) -> Optional[DecoderConfig]:
  return None if name is None else get_preset(name)
