"""Per-token source labels: where each token of a trajectory came from.

The rollout writes a label for every token it appends, so what may be trained on is a pure
function of the labels and the config instead of something rebuilt later by re-tokenising
decoded text (the bug behind Search-R1 PRs #19/#20).  This is the one label table; the masks
derived from it (loss, attention, positions) are training's, in `ragjax.rl.masks`.
"""

from __future__ import annotations

import enum

import numpy as np


class Source(enum.IntEnum):
  """Where a token came from; stored as int8.  PAD is 0 so zero-filled arrays read as padding."""
  PAD = 0
  PROMPT = 1     # the rendered prompt (system/user messages, chat framing, generation prompt)
  POLICY = 2     # sampled by the policy; keeps the sampler's ids and log-probs
  RETRIEVED = 3  # document text returned by the retriever
  INJECTED = 4   # method-inserted text the policy is meant to learn (REX-RAG probe prompt)
  ENV = 5        # environment text: tag wrappers, chat framing, invalid-action / fallback notices


LABEL_DTYPE = np.int8


def label_name(value: int) -> str:
  return Source(int(value)).name
