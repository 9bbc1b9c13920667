"""Does the policy copy or memorise?  Teacher-forced NLL of its tokens, by region and kind.

A policy that learned to search copies names: from the question into its query, from the
retrieved passage into its answer.  One that memorised its training worlds predicts names it
has seen and fails on new ones.  Scoring the same kind of teacher trace from a training world
and from the disjoint test world tells the two apart: copying gives similar NLL on both,
memorising gives a low train NLL and a high test NLL on the name tokens.

Tokens are grouped by the protocol tag they sit in (`<search>`, `<answer>`, `<think>`, or
'other' outside tags) and by kind: 'name' (a piece of a capitalised word) or 'word'.
"""

from __future__ import annotations

import collections
import functools
from typing import Sequence

import jax
import numpy as np

from ragjax.models.model_config import DecoderConfig
from ragjax.rl.logprobs import sequence_logprobs
from ragjax.rollout.labels import Source

REGION_TAGS = {"<search>": "search", "<answer>": "answer", "<think>": "think"}
CLOSING_TAGS = frozenset({"</search>", "</answer>", "</think>", "<information>", "</information>"})


def token_kinds(pieces: Sequence[str]) -> tuple[list[str], list[str]]:
  """(region, kind) of each token given its decoded text (`pieces[i]` = decode([id_i])).

  A token is a 'name' piece when it starts a capitalised word or continues one (no leading
  space, glued to a name piece); the region is set by the last opening tag before it.
  """
  regions, kinds = [], []
  region, in_name = "other", False
  for piece in pieces:
    if piece in REGION_TAGS or piece in CLOSING_TAGS:
      regions.append("tag")
      kinds.append("tag")
      region = REGION_TAGS.get(piece, "other")
      in_name = False
      continue
    stripped = piece.lstrip()
    starts_word = piece[:1].isspace() or not in_name
    if stripped[:1].isupper():
      in_name = True
    elif starts_word or not stripped[:1].isalpha():
      in_name = False
    regions.append(region)
    kinds.append("name" if in_name else "word")
  return regions, kinds


@functools.lru_cache(maxsize=8)
def _policy_logprobs(cfg: DecoderConfig):
  """One jitted scorer per model config, so repeated probes reuse their compiled shapes."""
  return jax.jit(lambda p, t, m: sequence_logprobs(cfg, p, t, attention_mask=m)[0])


def trace_nll(cfg: DecoderConfig, params, tok, rows_tokens: Sequence[np.ndarray],
              rows_labels: Sequence[np.ndarray], batch_size: int = 32
              ) -> dict[tuple[str, str], tuple[int, float]]:
  """{(region, kind): (count, mean NLL)} over the policy tokens of the given traces."""
  fn = _policy_logprobs(cfg)
  sums: dict = collections.defaultdict(float)
  counts: dict = collections.defaultdict(int)
  for s in range(0, len(rows_tokens), batch_size):
    chunk_t = list(rows_tokens[s:s + batch_size])
    chunk_l = list(rows_labels[s:s + batch_size])
    width = -(-max(len(t) for t in chunk_t) // 64) * 64
    n = len(chunk_t)
    chunk_t += [chunk_t[0]] * (batch_size - n)             # one compiled shape per width
    chunk_l += [chunk_l[0]] * (batch_size - n)
    toks = np.zeros((batch_size, width), np.int32)
    mask = np.zeros((batch_size, width), np.int32)
    for i, t in enumerate(chunk_t):
      toks[i, :len(t)] = t
      mask[i, :len(t)] = 1
    logp = np.asarray(fn(params, toks, mask))
    for i in range(n):
      t, lab = chunk_t[i], chunk_l[i]
      regions, kinds = token_kinds([tok.decode([int(x)]) for x in t])
      for j in np.flatnonzero(lab == int(Source.POLICY)):
        key = (regions[j], kinds[j])
        sums[key] -= float(logp[i, j])
        counts[key] += 1
  return {k: (counts[k], sums[k] / counts[k]) for k in sorted(counts)}


def nll_table(results: dict[str, dict[tuple[str, str], tuple[int, float]]]) -> str:
  """Markdown: one row per (region, kind), one column per named result (e.g. train / test)."""
  names = list(results)
  keys = sorted({k for r in results.values() for k in r})
  lines = ["| region | kind | " + " | ".join(f"NLL {n} (tokens)" for n in names) + " |",
           "|" + "---|" * (2 + len(names))]
  for k in keys:
    cells = []
    for n in names:
      c, v = results[n].get(k, (0, float("nan")))
      cells.append(f"{v:.2f} ({c})")
    lines.append(f"| {k[0]} | {k[1]} | " + " | ".join(cells) + " |")
  return "\n".join(lines)
