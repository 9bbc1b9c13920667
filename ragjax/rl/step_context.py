"""What a training step's plug-ins see once rewards and old log-probs exist.

The trainer fills one `StepContext` per step: a batch filter gets it before advantages are
computed (and returns the rows to keep); after the filter and the behaviour plug-in it is
rebuilt on the kept rows, with the behaviour log-probs, for metrics that ask for it.  Arrays
are host numpy, one row per trajectory, aligned with `rollout.traj.tokens`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ragjax.rollout.trajectory import RolloutBatch


@dataclasses.dataclass
class StepContext:
  step: int
  rollout: RolloutBatch
  examples: Sequence[Mapping]       # the dataset record of each row's prompt
  rewards: np.ndarray               # [R] total reward per row
  old_logprobs: np.ndarray          # [R, T] log pi_old (re-scored or the sampler's)
  loss_mask: np.ndarray             # [R, T] 1 = trained on
  num_prompts: int                  # unique prompts this step (B)
  group_size: int                   # samples per prompt (G); originals = B x G
  rl: Any                           # the RLConfig
  method_state: dict                # the trainer's checkpointed method state
  behaviour_logprobs: Optional[np.ndarray] = None   # [R, T] ratio denominators, when used

  @property
  def rows(self):
    return self.rollout.rows
