"""REX-RAG's policy correction: the ratio's denominator is the sampling mixture mu, per token.

A batch mixes originals (from pi_old) and kept probe clones (from the probe policy pi_eps), in
proportions 1 - a and a, with a = kept clones / rows.  As the authors' code computes it
(seeds §1.4 "as actually implemented"), for every response token t:

    mu_t = (1 - a) pi_old,t + a pi_eps,t

  original rows                  pi_eps = 0, so mu = (1 - a) pi_old and pi / mu = (1 + alpha) rho
                                 with alpha = a / (1 - a) (Eq. 15)
  clone, before the prompt       pi_eps = pi_old / z^(1/j): j = the response index of the first
  (the origin)                   inserted token (observation tokens count), z = 1 - accuracy of
                                 the batch's originals (Eq. 12)
  clone, the inserted prompt     pi_eps = Algorithm 1's PMF (`pmf.PromptPMF`)
  clone, after the prompt        pi_eps = pi_old, so mu = pi_old

The behaviour plug-in returns log mu in place of log pi_old (a behaviour "rex_rag" with
importance_sampling=False returns log pi_old: the "w/o IS" ablation).  It reads z from the
step record the trajectory filter writes into the method state, so it needs that filter.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ragjax import registry
from ragjax.models.text_encoding import encode_text
from ragjax.rl.rex_rag.pmf import PromptPMF
from ragjax.rollout.labels import Source
from ragjax.rollout.rex_rag import named_pool

# Segment kinds of a token (what `segment_kinds` returns); NONE: prompt or padding.
NONE, ORIGINAL, ORIGIN, PROBE_PROMPT, CONTINUATION = range(5)
SEGMENTS = {ORIGINAL: "original", ORIGIN: "origin", PROBE_PROMPT: "prompt",
            CONTINUATION: "continuation"}
STATE_KEY = "rex_rag"     # this method's entry in the trainer's method state


def inserted_span(labels: np.ndarray, row: int) -> tuple[int, int]:
  """[start, end) of the one inserted (INJECTED) run of a clone row."""
  pos = np.flatnonzero(np.asarray(labels) == Source.INJECTED)
  if pos.size == 0:
    raise ValueError(f"row {row} is a REX-RAG clone with no inserted prompt tokens")
  start, end = int(pos[0]), int(pos[-1]) + 1
  if end - start != pos.size:
    raise ValueError(f"row {row}: its inserted tokens are not one run (a clone is cloned once)")
  return start, end


def segment_kinds(labels: np.ndarray, prompt_len: int, length: int, is_clone: bool,
                  row: int = 0) -> np.ndarray:
  """[T] kind of each position of one row: NONE on the rendered prompt and padding, ORIGINAL
  on an original's response, ORIGIN / PROBE_PROMPT / CONTINUATION on a clone's."""
  kinds = np.full(len(labels), NONE, np.int8)
  if not is_clone:
    kinds[prompt_len:length] = ORIGINAL
    return kinds
  start, end = inserted_span(labels[:length], row)
  kinds[prompt_len:start] = ORIGIN
  kinds[start:end] = PROBE_PROMPT
  kinds[end:length] = CONTINUATION
  return kinds


def log_mu_row(old: np.ndarray, kinds: np.ndarray, a: float, z: float,
               prompt_probs: Optional[np.ndarray] = None, prompt_len: int = 0) -> np.ndarray:
  """log mu of one row (float64) from its log pi_old, segment kinds, a, z and, for a clone, the
  probe probabilities of its inserted tokens; NONE positions keep log pi_old."""
  old = np.asarray(old, np.float64)
  out = old.copy()
  with np.errstate(divide="ignore"):
    log_a, log_1ma = np.log(a), np.log1p(-a)
    orig = kinds == ORIGINAL
    out[orig] = log_1ma + old[orig]
    origin = np.flatnonzero(kinds == ORIGIN)
    if origin.size:
      if not 0.0 < z <= 1.0:
        raise ValueError(f"z = {z}: a clone's origin needs a batch with a wrong original")
      j = int(origin[-1]) + 1 - prompt_len     # response index of the first inserted token
      out[origin] = old[origin] + np.log((1.0 - a) + a * z ** (-1.0 / j))
    prompt = np.flatnonzero(kinds == PROBE_PROMPT)
    if prompt.size:
      probs = np.asarray(prompt_probs, np.float64)
      if probs.shape != prompt.shape:
        raise ValueError(f"{prompt.size} inserted tokens but {probs.size} probe probabilities")
      out[prompt] = np.logaddexp(log_1ma + old[prompt], log_a + np.log(probs))
  return out


def kept_clone_fraction(rows) -> float:
  """a: the share of the batch's rows that are (kept) probe clones."""
  return sum(r.clone_of is not None for r in rows) / max(len(rows), 1)


@dataclasses.dataclass
class MixtureBehaviour:
  """fn(batch, old_logprobs, state) -> [R, T] log mu (see the module docstring)."""
  pmf: PromptPMF
  importance_sampling: bool = True

  def __call__(self, batch, old_logprobs, state) -> np.ndarray:
    old = np.asarray(old_logprobs, np.float32)
    if not self.importance_sampling:
      return old
    record = state.get(STATE_KEY, {}).get("step")
    if record is None or record.get("rows") != batch.traj.num_rows:
      raise ValueError("behaviour 'rex_rag' needs this step's record of the batch filter "
                       "'rex_rag' (z and the kept rows): set rl.batch_filter='rex_rag'")
    z, a = float(record["z"]), kept_clone_fraction(batch.rows)
    t = batch.traj
    labels, tokens = np.asarray(t.labels), np.asarray(t.tokens)
    out = np.empty(old.shape, np.float64)
    for i, row in enumerate(batch.rows):
      p_len, length = int(t.prompt_lengths[i]), int(t.lengths[i])
      is_clone = row.clone_of is not None
      kinds = segment_kinds(labels[i], p_len, length, is_clone, i)
      probs = None
      if is_clone:
        start, end = inserted_span(labels[i, :length], i)
        inserted = tokens[i, start:end]
        if inserted not in self.pmf:
          raise ValueError(f"row {i}: its inserted prompt is not one of the behaviour's pool "
                           f"(rl.behaviour_kwargs.pool_name must name the clone hook's pool)")
        probs = self.pmf.token_probs(inserted)
      out[i] = log_mu_row(old[i], kinds, a, z, probs, p_len)
    return out.astype(np.float32)


@registry.register("behaviour", "rex_rag")
def rex_rag_behaviour(tokenizer=None, pool_name: str = "all", ppd: str = "ngram",
                      importance_sampling: bool = True) -> MixtureBehaviour:
  """REX-RAG's mixture behaviour policy mu (Eq. 12) as the ratio's denominator.

  Config entry point: `rl.behaviour = "rex_rag"`, `rl.behaviour_kwargs = {"pool_name":
  "all" | "five", "ppd": "ngram" | "coarse", "importance_sampling": bool}`.  The pool is
  tokenised as the rollout inserts it (each prompt on its own, no special tokens)."""
  if tokenizer is None:
    raise ValueError("behaviour 'rex_rag' tokenises the prompt pool: it needs the policy "
                     "tokenizer (the trainer passes the engine's)")
  pool_ids = [encode_text(tokenizer, p) for p in named_pool(pool_name)]
  return MixtureBehaviour(PromptPMF(pool_ids, ppd), importance_sampling=importance_sampling)
