"""Mid-rollout hooks: methods that change a row while it runs (REX-RAG's probe clones).

After every turn is parsed and before retrieval, each hook gets a `TurnView` per live row and a
`ragjax.rollout.engine.RowEditor` that can clone a row (sampler state and KV cache included)
into a spare row of the same group, delete a span that ends the row's last turn, insert
labelled tokens, and make the row continue without retrieval.  Hooks are registered plug-ins
(`ragjax.registry`, category "rollout_hook"), built from the config's `rollout.hooks`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ragjax.rollout.protocols.base import Action


@dataclasses.dataclass(frozen=True)
class TurnView:
  row: int
  turn: int
  final: bool
  action: Action
  text: str                     # the row's kept policy text of this turn
  group_id: int
  clone_of: Optional[int]
  prompt: Any = None            # the row's prompt as given to run() (a dataset record)
