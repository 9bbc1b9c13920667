"""Shared fixtures for the sampler tests: small random HF models and a trained byte-level BPE."""

from __future__ import annotations

import functools

import numpy as np

TAG = "</search>"


def hf_model(arch: str, seed: int = 0, vocab: int = 384, init_range: float = 0.2):
  """A float32 random transformers Qwen2 (bias, tied) or Llama (GQA, llama3 rope) model."""
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
  common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                initializer_range=init_range, bos_token_id=1, eos_token_id=2, pad_token_id=0)
  torch.manual_seed(seed)
  if arch == "qwen2":
    conf = Qwen2Config(**common, tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = Qwen2ForCausalLM(conf)
  elif arch == "llama":
    conf = LlamaConfig(**common, tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    model = LlamaForCausalLM(conf)
  else:
    raise ValueError(arch)
  return model.float().eval()


def ragjax_from_hf(model):
  """(DecoderConfig, params) for a transformers model, via the project's own converter."""
  from ragjax.models.model_config import decoder_config_from_hf
  from ragjax.models.hf_io import params_from_torch_state_dict
  cfg = decoder_config_from_hf(model.config.to_dict())
  return cfg, params_from_torch_state_dict(cfg, model.state_dict())


def hf_greedy(model, prompts, max_new_tokens: int):
  """transformers `generate` (greedy) on left-padded prompts; returns new tokens per row."""
  import torch
  width = max(len(p) for p in prompts)
  ids = torch.zeros((len(prompts), width), dtype=torch.long)
  mask = torch.zeros((len(prompts), width), dtype=torch.long)
  for i, p in enumerate(prompts):
    ids[i, width - len(p):] = torch.tensor(p)
    mask[i, width - len(p):] = 1
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                         min_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
  return out[:, width:].numpy()


@functools.lru_cache(maxsize=None)
def _forward(cfg, temperature: float):
  import jax
  from ragjax.models.decoder import Decoder

  @jax.jit
  def run(params, tokens):
    logits, _ = Decoder(cfg).apply({"params": params}, tokens)
    return jax.nn.log_softmax(logits / temperature, axis=-1)
  return run


def teacher_forced_logprobs(cfg, params, histories, temperature: float = 1.0, width: int = 64):
  """log_softmax(logits / T) of a plain full-sequence forward, one [T, V] array per history.

  Histories are right-padded to one fixed width (causal attention keeps pads from reaching
  real tokens) so the reference forward compiles once.
  """
  import jax.numpy as jnp
  tokens = np.zeros((len(histories), width), np.int32)
  for i, h in enumerate(histories):
    tokens[i, :len(h)] = h
  out = np.asarray(_forward(cfg, float(temperature))(params, jnp.asarray(tokens)))
  return [out[i, :len(h)] for i, h in enumerate(histories)]


CORPUS = [
    "<search>capital of France</search>", "x</search>", "a.</search>", "query </search>",
    "(who)</search>", "</search>.", "</search>. Then", "<information>doc</information>",
    "think about the search for a researcher", "research searches reach each arch",
    "</s> </se> </sea> <search>", "the answer is Paris</answer>", "a, </search>", "!.</search>",
]


@functools.lru_cache(maxsize=None)
def trained_bpe(vocab_size: int = 300):
  """A byte-level BPE trained here (no downloads) in which `</search>` spans several tokens."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                special_tokens=["<pad>", "<eos>"], show_progress=False)
  tok.train_from_iterator(CORPUS * 20, trainer)
  return tok
