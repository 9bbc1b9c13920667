"""Choosing the next token per row: greedy, temperature, top-k, top-p, with per-row keys.

Returns the token, its log-prob under the model's temperature-scaled distribution (the one
the trainer recomputes) and under the truncated distribution actually sampled from.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

_NEG = -jnp.inf


def sample_tokens(logits: jnp.ndarray, keys: jnp.ndarray, banned: Optional[jnp.ndarray], *,
                  greedy: bool, temperature, top_k: int, top_p, nucleus: Optional[bool] = None,
                  candidates: int = 1024):
  """logits [B, V] float32, keys [B, 2] uint32, banned [B, V] bool or None; `temperature` a
  number or one per row ([B]); `top_p` a number or a traced scalar, applied when `nucleus`
  (static; default `top_p < 1` for a number), so one program takes every top_p value.
  `candidates`: where the nucleus is looked for first when `top_k` is 0 (`nucleus_sample`).

  Returns (tokens [B] int32, logprobs [B], sampling_logprobs [B]).
  """
  if nucleus is None:
    nucleus = top_p < 1.0
  temp = 1.0 if greedy else jnp.asarray(temperature, jnp.float32)
  scaled = logits / (temp[:, None] if jnp.ndim(temp) == 1 else temp)
  model_lp = jax.nn.log_softmax(scaled, axis=-1)
  masked = scaled if banned is None else jnp.where(banned, _NEG, scaled)
  if greedy:
    tok = jnp.argmax(masked, axis=-1).astype(jnp.int32)
    samp_lp = jnp.zeros(tok.shape, jnp.float32)
  elif nucleus and not top_k:
    tok, samp_lp = nucleus_sample(masked, keys, top_p, candidates)
  elif top_k or nucleus:
    k = top_k if top_k else logits.shape[-1]
    vals, idx = jax.lax.top_k(masked, min(k, logits.shape[-1]))     # descending
    if nucleus:
      probs = jax.nn.softmax(vals, axis=-1)
      before = jnp.cumsum(probs, axis=-1) - probs                    # mass strictly above
      vals = jnp.where(before < top_p, vals, _NEG)                  # always keeps the top one
    j = jax.vmap(jax.random.categorical)(keys, vals)
    tok = jnp.take_along_axis(idx, j[:, None], axis=-1)[:, 0].astype(jnp.int32)
    samp_lp = jnp.take_along_axis(jax.nn.log_softmax(vals, axis=-1), j[:, None], axis=-1)[:, 0]
  else:
    tok = jax.vmap(jax.random.categorical)(keys, masked).astype(jnp.int32)
    samp_lp = jnp.take_along_axis(jax.nn.log_softmax(masked, axis=-1), tok[:, None], axis=-1)[:, 0]
  lp = jnp.take_along_axis(model_lp, tok[:, None], axis=-1)[:, 0]
  return tok, lp, samp_lp


def nucleus_sample(logits: jnp.ndarray, keys: jnp.ndarray, top_p, candidates: int):
  """Top-p sampling over the whole vocabulary without sorting it for every row.

  The nucleus of a row is its most likely tokens (ties: the lower id first) while the mass
  before a token is below `top_p`.  It is looked for among the row's `candidates` most likely
  tokens (one `lax.top_k`); only when some row's nucleus is larger (the candidates' mass is
  below `top_p`) does the whole vocabulary get sorted, and then only those rows take that
  result.  The token is the Gumbel-max over the nucleus with one noise value per token id, so
  a row draws the same token from either search and whatever rows share its batch.
  Returns (tokens [B] int32, log-probs [B] under the nucleus distribution)."""
  v = logits.shape[-1]
  lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  # Gumbel noise of token id t in row r: a function of (the row's key, t) alone
  noise_of = jax.vmap(jax.vmap(lambda key, t: jax.random.gumbel(jax.random.fold_in(key, t)),
                               in_axes=(None, 0)))

  def among(k):
    vals, idx = jax.lax.top_k(logits, k)                                          # descending
    probs = jnp.exp(vals - lse)
    mass = jnp.cumsum(probs, axis=-1)
    keep = mass - probs < top_p                                    # always keeps the top one
    kept = jnp.where(keep, vals, _NEG)
    j = jnp.argmax(jnp.where(keep, vals + noise_of(keys, idx), _NEG), axis=-1)
    tok = jnp.take_along_axis(idx, j[:, None], axis=-1)[:, 0].astype(jnp.int32)
    lp = jnp.take_along_axis(jax.nn.log_softmax(kept, axis=-1), j[:, None], axis=-1)[:, 0]
    return tok, lp, mass[:, -1] >= top_p

  k = min(int(candidates), v)
  tok, lp, holds = among(k)
  if k == v:
    return tok, lp

  def whole():
    t, l, _ = among(v)
    return jnp.where(holds, tok, t), jnp.where(holds, lp, l)
  return jax.lax.cond(jnp.all(holds), lambda: (tok, lp), whole)
