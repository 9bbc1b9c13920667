"""Flax decoder (Llama / Qwen2) and BERT encoder, presets, and HF checkpoint I/O."""

from ragjax.models.model_config import DecoderConfig, EncoderConfig, RopeScaling
from ragjax.models.decoder import Decoder, init_cache, init_params, unembedding
from ragjax.models.encoder import BertEncoder, TextEncoder, default_minilm_dir, load_encoder
from ragjax.models.hf_io import load_decoder, load_tokenizer, save_decoder
from ragjax.models.presets import PRESETS, get_preset, resolve_decoder_config
from ragjax.models.safetensors_io import CheckpointError

__all__ = ["DecoderConfig", "EncoderConfig", "RopeScaling", "Decoder", "init_cache",
           "init_params", "unembedding", "BertEncoder", "TextEncoder", "default_minilm_dir",
           "load_encoder", "load_decoder", "load_tokenizer", "save_decoder", "PRESETS",
           "get_preset", "resolve_decoder_config", "CheckpointError"]
