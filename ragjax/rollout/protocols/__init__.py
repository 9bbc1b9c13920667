"""Search protocols, one per grammar, each registered in `ragjax.registry` by a decorator on its
class (`@registry.register("protocol")`, under its `name`), so a config picks one by name and
a user protocol binds through gin like any plug-in (docs/adding_a_method.md)."""

from __future__ import annotations

from ragjax import registry
from ragjax.rollout.protocols.autorefine import AutoRefine
from ragjax.rollout.protocols.base import Action, Kind, PromptInput, Protocol, as_prompt_input
from ragjax.rollout.protocols.r3_rag import R3Rag
from ragjax.rollout.protocols.rezero import ReZero
from ragjax.rollout.protocols.search_r1 import DirectAnswer, RetrieveOnce, RexRag, SearchR1
from ragjax.rollout.protocols.ur2 import UR2
from ragjax.rollout.protocols.world import WorldSearch


def get_protocol(name: str, **overrides) -> Protocol:
  """The protocol registered as `name` with field `overrides` (e.g. `top_k=5`); an unknown
  name or field is a ValueError naming it (`protocol.<field>` as a config writes it)."""
  registry.check("protocol", [name], "protocol.name")
  registry.check_kwargs("protocol", name, overrides, "protocol")
  from ragjax.typed_config import from_dict
  return from_dict(registry.lookup("protocol", name), overrides, "protocol")


__all__ = ["Action", "AutoRefine", "DirectAnswer", "Kind", "PromptInput", "Protocol", "R3Rag",
           "RetrieveOnce", "ReZero", "RexRag", "SearchR1", "UR2", "WorldSearch", "as_prompt_input", "get_protocol"]
