"""Small random transformers checkpoints (PyTorch, float32) saved to disk for reference tests."""

from __future__ import annotations

import numpy as np

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

KINDS = {
    # Qwen2: q/k/v bias, tied embeddings.
    "qwen2_tied": ("qwen2", dict(tie_word_embeddings=True)),
    # Qwen2 with its own lm_head.
    "qwen2_untied": ("qwen2", dict(tie_word_embeddings=False)),
    # Llama-3.1 style: rope scaling and GQA (8 query heads over 2 KV heads).
    "llama_scaled": ("llama", dict(tie_word_embeddings=False, rope_theta=500000.0,
                                   rope_scaling=LLAMA3_SCALING, num_attention_heads=8,
                                   num_key_value_heads=2, head_dim=8)),
}


def make_hf_decoder(kind: str, seed: int = 0):
  """A random transformers causal LM of the given kind, in eval mode."""
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
  family, extra = KINDS[kind]
  base = dict(vocab_size=256, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6)
  base.update(extra)
  torch.manual_seed(seed)
  if family == "qwen2":
    model = Qwen2ForCausalLM(Qwen2Config(**base))
  else:
    model = LlamaForCausalLM(LlamaConfig(**base))
  # Random init leaves biases at zero; make them non-trivial so the bias path is exercised.
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("bias") or "norm" in name:
        p.add_(0.1 * torch.randn_like(p))
  return model.eval()


def save_hf_decoder(kind: str, path: str, seed: int = 0, **save_kw):
  model = make_hf_decoder(kind, seed)
  model.save_pretrained(path, **save_kw)
  return model


def padded_batch(vocab: int, lengths, seed: int = 0):
  """Right-padded random token batch and its mask."""
  rng = np.random.RandomState(seed)
  t = max(lengths)
  tokens = rng.randint(1, vocab, (len(lengths), t)).astype(np.int64)
  mask = np.zeros((len(lengths), t), np.int64)
  for i, n in enumerate(lengths):
    mask[i, :n] = 1
    tokens[i, n:] = 0
  return tokens, mask


def torch_logits(model, tokens, mask):
  import torch
  with torch.no_grad():
    return model(torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits.float().numpy()


def random_params(cfg, seed: int = 0, head: str = "lm"):
  """`ragjax.models.decoder.init_params`, jitted: op by op it costs seconds of dispatch even
  for the tiny preset."""
  import jax
  from ragjax.models.decoder import init_params
  return jax.jit(lambda key: init_params(cfg, key, head=head))(jax.random.PRNGKey(seed))
