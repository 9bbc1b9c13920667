"""Search protocols, one per grammar, and a registry to pick one by name from a config."""

from __future__ import annotations

from ragjax.rollout.protocols.autorefine import AutoRefine
from ragjax.rollout.protocols.base import Action, Kind, PromptInput, Protocol, as_prompt_input
from ragjax.rollout.protocols.r3_rag import R3Rag
from ragjax.rollout.protocols.rezero import ReZero
from ragjax.rollout.protocols.search_r1 import RexRag, SearchR1
from ragjax.rollout.protocols.ur2 import UR2
from ragjax.rollout.protocols.world import WorldSearch

PROTOCOLS: dict[str, type[Protocol]] = {
    cls.name: cls for cls in (SearchR1, RexRag, AutoRefine, R3Rag, UR2, ReZero, WorldSearch)}


def get_protocol(name: str, **overrides) -> Protocol:
  """The protocol called `name` with field `overrides` (e.g. `top_k=5`); an unknown name or
  field is a ValueError naming it (`protocol.<field>` as a config writes it)."""
  if name not in PROTOCOLS:
    raise ValueError(f"protocol.name: unknown protocol {name!r}; known: {sorted(PROTOCOLS)}")
  from ragjax.typed_config import from_dict
  return from_dict(PROTOCOLS[name], overrides, "protocol")


__all__ = ["Action", "AutoRefine", "Kind", "PROTOCOLS", "PromptInput", "Protocol", "R3Rag",
           "ReZero", "RexRag", "SearchR1", "UR2", "WorldSearch", "as_prompt_input", "get_protocol"]
