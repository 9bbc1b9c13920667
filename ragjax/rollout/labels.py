"""Per-token source labels and the loss mask derived from them.

Every token of a trajectory records where it came from, so the loss mask is a pure function of
the labels and the config instead of something rebuilt later by re-tokenising decoded text
(the bug behind Search-R1 PRs #19/#20).  REX-RAG trains on its injected exploration prompt;
everything the environment wrote (retrieved documents, tag wrappers, chat framing, invalid-action
messages) is never trained on.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class MaskConfig:
  """Which labels carry loss.  Policy tokens always do; retrieved/env/prompt/pad never do."""
  train_injected: bool = False


def loss_mask_from_labels(labels, config: MaskConfig = MaskConfig(), dtype=np.float32):
  """1 where the label is trained on, else 0; works on numpy and jax arrays alike."""
  keep = labels == Source.POLICY
  if config.train_injected:
    keep = keep | (labels == Source.INJECTED)
  return keep.astype(dtype)


def label_name(value: int) -> str:
  return Source(int(value)).name
