"""Algorithm 1 of REX-RAG: the probe policy's probability of each inserted-prompt token.

The exploration prompts are tokenised (with the policy's tokenizer, as the rollout inserts
them) and counted as an unsmoothed variable-length n-gram: C[p][x] = how many pool prompts
start with prefix p followed by token x, where p runs from the prompt's first token.
PMF(p, x) = C[p][x] / sum_x' C[p][x'], zero for unseen continuations.  The first token of a
prompt gets probability 1, as in the authors' code (every pool prompt opens with `<think>`).
The coarse variant (Table 6's "Coarse PPD", a commented-out line of the code) gives the first
token 1 / |pool| and every later token 1.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

PPD_KINDS = ("ngram", "coarse")


class PromptPMF:
  """Per-token probe probabilities of inserted prompts drawn from one pool."""

  def __init__(self, pool_ids: Sequence[Sequence[int]], kind: str = "ngram"):
    if kind not in PPD_KINDS:
      raise ValueError(f"unknown probe prompt distribution {kind!r}; known: {PPD_KINDS}")
    if not pool_ids or any(len(ids) == 0 for ids in pool_ids):
      raise ValueError("the prompt pool is empty or holds a prompt with no tokens")
    self.kind = kind
    self.pool = [tuple(int(i) for i in ids) for ids in pool_ids]
    self._members = set(self.pool)
    self.counts: dict[tuple[int, ...], Counter] = {}
    for ids in self.pool:
      for i in range(1, len(ids)):
        self.counts.setdefault(ids[:i], Counter())[ids[i]] += 1

  def prob(self, prefix: Sequence[int], token: int) -> float:
    """PMF(prefix, token) for a non-empty prefix of the inserted prompt."""
    c = self.counts.get(tuple(prefix))
    return c[int(token)] / sum(c.values()) if c else 0.0

  def token_probs(self, ids: Sequence[int]) -> np.ndarray:
    """pi_eps of each token of one inserted prompt (float64)."""
    ids = [int(i) for i in ids]
    if not ids:
      return np.zeros(0)
    if self.kind == "coarse":
      return np.asarray([1.0 / len(self.pool)] + [1.0] * (len(ids) - 1))
    return np.asarray([1.0] + [self.prob(ids[:i], ids[i]) for i in range(1, len(ids))])

  def __contains__(self, ids) -> bool:
    return tuple(int(i) for i in ids) in self._members
