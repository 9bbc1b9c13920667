"""Token log-probs and entropy computed in vocabulary chunks, so [B, T, V] never exists.

With V = 152k a full logits tensor for B*T = 64k tokens is 40 GB in float32.  We scan over
vocab chunks of the [E, V] unembedding keeping an online logsumexp (running max m, scaled sum
s = sum e^(z-m), and u = sum e^(z-m) z for the entropy), and pick the target logit from
whichever chunk holds it.  The scan body is rematerialised, so the backward pass also holds
only one [B, T, chunk] block at a time (a vocabulary of one chunk is not scanned).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from ragjax.models.model_config import DecoderConfig, as_dtype
from ragjax.models.decoder import Decoder, tokens_flat, unembedding


def chunked_logprobs(hidden: jnp.ndarray, w: jnp.ndarray, targets: jnp.ndarray,
                     chunk: int = 8192, compute_dtype=None):
  """log softmax(hidden @ w)[targets] and entropy, each shaped as targets, float32.

  hidden [B, T, E] (any leading axes), w [E, V], targets [B, T] int.  V need not divide by `chunk` (the tail chunk
  is padded with masked columns).
  """
  e, v = w.shape
  chunk = min(chunk, v)
  n = -(-v // chunk)
  pad = n * chunk - v
  dt = compute_dtype or hidden.dtype
  wp = jnp.pad(w, ((0, 0), (0, pad))) if pad else w
  w_chunks = wp.reshape(e, n, chunk).transpose(1, 0, 2)            # [n, E, C]
  # One token axis (see ragjax.models.decoder.tokens_flat): the unembedding's gradient is
  # then contracted in place instead of after a transposed copy of the whole logits block.
  shape = targets.shape
  h = tokens_flat(hidden).astype(dt)
  targets = targets.reshape(-1)
  neg = jnp.float32(-jnp.inf)

  def body(carry, xs):
    m, s, u = carry
    wc, start = xs
    z = jnp.einsum("te,ec->tc", h, wc.astype(dt), preferred_element_type=jnp.float32)
    zf = z
    if pad:                    # the tail chunk's padded columns take no probability
      real = start + jnp.arange(chunk) < v
      z, zf = jnp.where(real, z, neg), jnp.where(real, z, 0.0)
    # The shift is a constant of the logsumexp (the result does not depend on it), so no
    # gradient flows through it: the max's own backward pass would double this block's cost.
    m_new = jax.lax.stop_gradient(jnp.maximum(m, z.max(axis=-1)))
    scale = jnp.exp(m - m_new)
    p = jnp.exp(z - m_new[..., None])
    s = s * scale + p.sum(-1)
    u = u * scale + (p * zf).sum(-1)
    return (m_new, s, u), None

  init = (jnp.full(targets.shape, -jnp.inf, jnp.float32), jnp.zeros(targets.shape, jnp.float32),
          jnp.zeros(targets.shape, jnp.float32))
  starts = jnp.arange(n, dtype=targets.dtype) * chunk
  if n == 1:
    # The whole vocabulary is one chunk: nothing to scan, and rematerialising the block
    # would only compute the logits and their exponentials a second time in the backward
    # pass; the backward holds the one [B, T, V] block either way.
    (m, s, u), _ = body(init, (w_chunks[0], starts[0]))
  else:
    (m, s, u), _ = jax.lax.scan(jax.checkpoint(body), init, (w_chunks, starts))
  # The target's logit straight from its unembedding column: picking it out of the logits
  # block would scatter into the whole block in the backward pass.
  tgt = jnp.einsum("te,te->t", h, jnp.take(w.T, targets, axis=0).astype(dt),
                   preferred_element_type=jnp.float32)
  logz = m + jnp.log(s)
  return (tgt - logz).reshape(shape), (logz - u / s).reshape(shape)


def full_logprobs(hidden, w, targets):
  """The naive reference: materialises the logits (tests only)."""
  logits = jnp.einsum("bte,ev->btv", hidden, w, preferred_element_type=jnp.float32)
  logp = jax.nn.log_softmax(logits, axis=-1)
  ent = -(jnp.exp(logp) * logp).sum(-1)
  return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], ent


def hidden_states(cfg: DecoderConfig, params, tokens, positions=None, attention_mask=None,
                  hidden_fn=None):
  """The decoder's final-normed hidden states [B, T, E]: `hidden_fn(params, tokens, positions,
  attention_mask)` when given (e.g. LoRA's adapter-aware forward,
  `ragjax.models.lora.LoraAdapter.hidden_fn`), else the plain decoder on `params`."""
  if hidden_fn is not None:
    return hidden_fn(params, tokens, positions, attention_mask)
  return Decoder(cfg).apply({"params": params}, tokens, positions, attention_mask,
                            return_hidden=True)[0]


def sequence_logprobs(cfg: DecoderConfig, params, tokens, positions=None, attention_mask=None,
                      chunk: int = 8192, temperature: float = 1.0, hidden_fn=None):
  """Per-token log pi(tokens[t] | tokens[<t]) and entropy, aligned with tokens ([:, 0] = 0)."""
  hidden = hidden_states(cfg, params, tokens, positions, attention_mask, hidden_fn)
  w = unembedding(cfg, params)
  h = hidden[:, :-1]
  if temperature != 1.0:
    h = h / temperature
  lp, ent = chunked_logprobs(h, w, tokens[:, 1:], chunk=chunk, compute_dtype=as_dtype(cfg.dtype))
  pad = jnp.zeros((tokens.shape[0], 1), jnp.float32)
  return jnp.concatenate([pad, lp], 1), jnp.concatenate([pad, ent], 1)


def logprobs_at(cfg: DecoderConfig, params, tokens, index, positions=None, attention_mask=None,
                chunk: int = 8192, temperature: float = 1.0, hidden_fn=None):
  """log pi(tokens[b, index[b, k]] | tokens[b, :index[b, k]]) and entropy, each [B, K].

  Only the K chosen positions per row go through the unembedding, which is most of a
  small-model step when few tokens are trained on (SFT on search traces trains on the
  queries and the answer, not on the retrieved documents).  index >= 1.
  """
  hidden = hidden_states(cfg, params, tokens, positions, attention_mask, hidden_fn)
  h = jnp.take_along_axis(hidden, (index - 1)[..., None], axis=1)      # [B, K, E]
  if temperature != 1.0:
    h = h / temperature
  targets = jnp.take_along_axis(tokens, index, axis=1)
  return chunked_logprobs(h, unembedding(cfg, params), targets, chunk=chunk,
                          compute_dtype=as_dtype(cfg.dtype))


def sequence_values(cfg: DecoderConfig, critic_params, tokens, positions=None,
                    attention_mask=None):
  """Critic values aligned with tokens: V[:, t] scores the state before token t is emitted."""
  values, _ = Decoder(cfg, head="value").apply({"params": critic_params}, tokens, positions,
                                               attention_mask)
  pad = jnp.zeros((tokens.shape[0], 1), jnp.float32)
  return jnp.concatenate([pad, values[:, :-1].astype(jnp.float32)], 1)
