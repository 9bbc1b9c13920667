"""Evaluation-harness fixtures: a real BPE tokenizer with the protocol tags (trained here), a small
HF decoder saved with `save_decoder` whose weights make it a deterministic bigram chain (so a
greedy rollout searches once and then answers, and the table has numbers to check), and a
corpus slice of the shared passages.

The chain: every layer's attention and MLP output projections are zero, so the residual
stream at a position is that token's embedding; chain tokens get orthogonal embeddings and the
LM head maps each to its successor.  From the prompt's last token the policy writes
`<search> QUERY </search>`; after the observation's last token, `<answer> ANSWER </answer>`.
"""

from __future__ import annotations

import os

import numpy as np

from ragjax.rollout.protocols.search_r1 import LONG_INVALID_MESSAGE, SEARCH_R1_TEMPLATE

CORPUS = "corpus/derived_multihop_wiki_passages_31144.jsonl"
QUERY = " capital city"


def train_tokenizer_here(answer: str):
  """A byte-level BPE with the protocol tags as single tokens, trained on the Search-R1 prompt
  and the chain's query and answer (so each is a few distinct tokens)."""
  from ragjax.data.tokenizer import train_tokenizer
  texts = [SEARCH_R1_TEMPLATE, LONG_INVALID_MESSAGE, "</information>\n\n", "Doc 1(Title: X) y\n",
           *[f"<search>{QUERY} </search> <answer> {answer} </answer>"] * 20] * 3
  return train_tokenizer(texts, vocab_size=700, min_frequency=1)


def _ids(tok, text):
  return tok(text, add_special_tokens=False)["input_ids"]


def chain_policy(out_dir: str, tok, answer: str, hidden: int = 64) -> list[int]:
  """Saves the bigram-chain decoder; returns the answer's token ids (all distinct from the
  rest of the chain, or ValueError)."""
  import jax
  from ragjax.models.model_config import DecoderConfig
  from ragjax.models.decoder import init_params
  from ragjax.models.hf_io import save_decoder
  from ragjax.models.chat_template import render_chat
  prompt = render_chat(tok, [{"role": "user", "content": "q"}])
  start = _ids(tok, prompt)[-1]
  after_obs = _ids(tok, "</information>\n\n")[-1]
  tag = {t: tok.convert_tokens_to_ids(t) for t in ("<search>", "</search>", "<answer>",
                                                   "</answer>")}
  ans = _ids(tok, " " + answer.strip())
  chains = [[start, tag["<search>"], *_ids(tok, QUERY), tag["</search>"]],
            [after_obs, tag["<answer>"], *ans, tag["</answer>"]]]
  heads = [t for ch in chains for t in ch[:-1]]
  if len(set(heads)) != len(heads) or start == after_obs:
    raise ValueError(f"chain tokens repeat ({heads}); pick another answer")
  cfg = DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=hidden,
                      intermediate_size=2 * hidden, num_layers=1, num_heads=2, num_kv_heads=1,
                      head_dim=hidden // 2, rope_theta=10000.0, tie_word_embeddings=False,
                      max_position_embeddings=4096, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
  params = jax.tree.map(np.asarray, init_params(cfg, jax.random.PRNGKey(0)))
  emb = np.random.default_rng(0).normal(0, 0.02, (len(tok), hidden)).astype(np.float32)
  head = np.zeros((hidden, len(tok)), np.float32)
  if len(heads) > hidden:
    raise ValueError(f"{len(heads)} chain tokens need hidden >= {len(heads)}")
  for slot, t in enumerate(heads):
    emb[t] = 0.0
    emb[t, slot] = 1.0
  for ch in chains:
    for a, b in zip(ch, ch[1:]):
      head[heads.index(a), b] = 20.0
  layer = params["layers_0"]
  layer["self_attn"]["o_proj"]["kernel"] = np.zeros_like(layer["self_attn"]["o_proj"]["kernel"])
  layer["mlp"]["down_proj"]["kernel"] = np.zeros_like(layer["mlp"]["down_proj"]["kernel"])
  params["embed_tokens"]["embedding"] = emb
  params["lm_head"]["kernel"] = head
  save_decoder(out_dir, cfg, params, tokenizer=tok)
  return ans


def corpus_slice(shared_data: str, out_path: str, n: int = 300) -> str:
  with open(os.path.join(shared_data, CORPUS), encoding="utf-8") as f, \
       open(out_path, "w", encoding="utf-8") as g:
    for i, line in enumerate(f):
      if i >= n:
        break
      g.write(line)
  return out_path
