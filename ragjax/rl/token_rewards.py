"""Where a trajectory's rewards land on its tokens: the one placement function.

A row's reward is a per-step list (one entry per turn, `ragjax.rl.rewards`); a step ends at its
last policy token (`RowMeta.step_ends`).  Each step's reward but the last sits on its step end;
the last step's, and that of any step that kept no token, on the row's last trained token (the
trajectory's end).  An outcome reward is a one-step list; a step sample (R3-RAG,
`ragjax.rl.step_samples`) is a row with one step, so its turn's reward lands on the
sample's last trained token.  The token rewards feed GAE (`ragjax.rl.advantages.gae`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def last_token_index(loss_mask: np.ndarray) -> np.ndarray:
  """Index of each row's last trained token (-1 when a row has none)."""
  lm = np.asarray(loss_mask) > 0
  t = lm.shape[1]
  idx = t - 1 - np.argmax(lm[:, ::-1], axis=1)
  return np.where(lm.any(axis=1), idx, -1)


def place_rewards(rewards: Sequence[Sequence[float]], loss_mask: np.ndarray,
                  step_ends: Optional[Sequence[Sequence[int]]] = None) -> np.ndarray:
  """[B, T] float32 token rewards from each row's per-step rewards.

  rewards[b][i] is step i's reward of row b; step_ends[b][i] the token index it ends on (-1:
  the step kept no token; None: no step ends, every reward on the row's last trained token).
  Every step but the last puts its reward on its end (when that is a token of the row); the
  rest add up on the row's last trained token, and are dropped when the row trains on none."""
  mask = np.asarray(loss_mask)
  out = np.zeros(mask.shape, np.float32)
  last = last_token_index(mask)
  for b, rs in enumerate(rewards):
    ends = () if step_ends is None else step_ends[b]
    if len(ends) > len(rs):
      raise ValueError(f"row {b}: {len(rs)} step rewards but {len(ends)} step ends")
    carry = 0.0
    for i, r in enumerate(rs):
      end = ends[i] if i < len(ends) else -1
      if i == len(rs) - 1 or end < 0 or end >= mask.shape[1]:
        carry += r
      else:
        out[b, end] += r
    if last[b] >= 0:
      out[b, last[b]] += carry
  return out
