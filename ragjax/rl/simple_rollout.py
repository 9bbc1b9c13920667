"""A minimal one-search rollout with a real sampler, for tests, the resume probe and smoke runs.

Each trajectory is: left-padded prompt bytes | `n1` sampled tokens | a retrieved passage (looked
up in a small in-memory corpus by the sampled text) | `n2` sampled tokens.  It exercises what the
trainer needs from a rollout (labels with retrieved blocks, sampler log-probs, group ids,
decoded responses, metadata) without the multi-turn engine in `ragjax.rollout`, which replaces it.
Bytes are token ids 0..255, so any decoder with vocab >= 256 works.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models.config import DecoderConfig
from ragjax.models.decoder import Decoder
from ragjax.rl.batch import LABELS


@dataclasses.dataclass
class Trajectories:
  """What the trainer consumes from any rollout (the engine's Trajectory has these fields)."""
  tokens: np.ndarray            # [N, T] int32
  labels: np.ndarray            # [N, T] source labels (ragjax.rl.batch.LABELS)
  sampler_logprobs: np.ndarray  # [N, T] float32
  group_id: list                # [N] prompt uid
  response_text: list           # [N] decoded response span (policy + observations)
  metadata: list                # [N] dicts: queries, retrieved ids, ...
  timings: dict = dataclasses.field(default_factory=dict)


def encode_bytes(text: str, length: int) -> np.ndarray:
  ids = list(text.encode("utf-8"))[-length:]
  return np.asarray(ids, np.int32)


def decode_bytes(ids) -> str:
  return bytes(int(i) for i in ids if 0 < int(i) < 256).decode("utf-8", errors="replace")


@functools.partial(jax.jit, static_argnames=("cfg", "n", "temperature"))
def _sample_span(cfg: DecoderConfig, params, tokens, attn, key, start, n: int,
                 temperature: float):
  """Samples tokens[:, start:start+n] one at a time (full forward per token: tiny models only)."""
  def body(i, carry):
    tokens, attn, logps = carry
    t = start + i
    pos = jnp.maximum(jnp.cumsum(attn, 1) - 1, 0)
    logits, _ = Decoder(cfg).apply({"params": params}, tokens, pos, attn)
    lg = jax.lax.dynamic_index_in_dim(logits, t - 1, axis=1, keepdims=False) / temperature
    lg = lg.at[:, 0].set(-jnp.inf)                  # never sample the pad id
    tok = jax.random.categorical(jax.random.fold_in(key, i), lg)
    lp = jax.nn.log_softmax(lg)[jnp.arange(tok.shape[0]), tok]
    tokens = tokens.at[:, t].set(tok.astype(tokens.dtype))
    attn = attn.at[:, t].set(1)
    logps = logps.at[:, t].set(lp)
    return tokens, attn, logps
  logps = jnp.zeros(tokens.shape, jnp.float32)
  return jax.lax.fori_loop(0, n, body, (tokens, attn, logps))


class SimpleRollout:
  """rollout_fn(params, prompts, rng) -> Trajectories, one search per trajectory."""

  def __init__(self, cfg: DecoderConfig, corpus: Sequence[str], prompt_len: int = 8,
               n1: int = 6, doc_len: int = 6, n2: int = 6, temperature: float = 1.0):
    if cfg.vocab_size < 256:
      raise ValueError(f"SimpleRollout needs vocab_size >= 256 (byte ids), got {cfg.vocab_size}")
    self.cfg, self.corpus = cfg, list(corpus)
    self.p, self.n1, self.d, self.n2, self.temperature = prompt_len, n1, doc_len, n2, temperature

  def __call__(self, params, prompts: Sequence[dict], rng) -> Trajectories:
    t0 = time.perf_counter()
    n, p, n1, d, n2 = len(prompts), self.p, self.n1, self.d, self.n2
    t = p + n1 + d + n2
    tokens = np.zeros((n, t), np.int32)
    labels = np.full((n, t), LABELS["padding"], np.int32)
    for i, pr in enumerate(prompts):
      ids = encode_bytes(pr["question"], p)
      tokens[i, p - len(ids):p] = ids
      labels[i, p - len(ids):p] = LABELS["prompt"]
    attn = (labels != LABELS["padding"]).astype(np.int32)
    k1, k2 = jax.random.split(rng)
    tok, att, lp1 = _sample_span(self.cfg, params, jnp.asarray(tokens), jnp.asarray(attn), k1,
                                 p, n1, self.temperature)
    tokens, attn = np.array(tok), np.array(att)
    labels[:, p:p + n1] = LABELS["policy"]
    t_ret = time.perf_counter()
    doc_ids = []
    for i in range(n):                       # retrieval: corpus entry chosen by the query bytes
      query = tokens[i, p:p + n1]
      j = int(query.sum()) % len(self.corpus)
      doc_ids.append(j)
      doc = np.zeros(d, np.int32) + ord(" ")
      ids = encode_bytes(self.corpus[j], d)[:d]
      doc[:len(ids)] = ids
      tokens[i, p + n1:p + n1 + d] = doc
    labels[:, p + n1:p + n1 + d] = LABELS["retrieved"]
    attn[:, p + n1:p + n1 + d] = 1
    t_ret = time.perf_counter() - t_ret
    tok, att, lp2 = _sample_span(self.cfg, params, jnp.asarray(tokens), jnp.asarray(attn), k2,
                                 p + n1 + d, n2, self.temperature)
    tokens = np.array(tok)
    labels[:, p + n1 + d:] = LABELS["policy"]
    logps = np.asarray(lp1) + np.asarray(lp2)
    texts = [decode_bytes(tokens[i, p:]) for i in range(n)]
    meta = [{"queries": [decode_bytes(tokens[i, p:p + n1])], "retrieved_ids": [doc_ids[i]],
             "num_searches": 1} for i in range(n)]
    return Trajectories(tokens=tokens, labels=labels, sampler_logprobs=logps.astype(np.float32),
                        group_id=[pr["uid"] for pr in prompts], response_text=texts,
                        metadata=meta, timings={"rollout_s": time.perf_counter() - t0,
                                                "retrieval_s": t_ret})
