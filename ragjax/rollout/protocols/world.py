"""The embedded default's protocol: Search-R1's tags with a prompt a from-scratch model can use.

A policy trained from scratch has no use for Search-R1's 90-word instruction (it never learnt
English), and every prompt token costs CPU time in the embedded default, so the prompt is just
`Question: ...` and documents are `(Title) text` lines.  Parsing, stop sequences, the
invalid-action rule and the final no-search turn are Search-R1's (Jin et al. 2025).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ragjax import registry
from ragjax.rollout.protocols.base import PromptInput, hit_contents, search_r1_question
from ragjax.rollout.protocols.search_r1 import SearchR1

WORLD_INVALID_MESSAGE = "\ninvalid action\n"


def compact_docs(hits: Sequence) -> str:
  """`(Title) text` per hit, one per line."""
  out = []
  for hit in hits:
    title, _, text = hit_contents(hit).partition("\n")
    out.append(f"({title.strip().strip(chr(34))}) {text.strip()}\n")
  return "".join(out)


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class WorldSearch(SearchR1):
  """The synthetic world's short Search-R1-style protocol, for small from-scratch policies."""
  name = "world"
  top_k: int = 2
  max_turns: int = 3
  obs_max_tokens: int = 200
  invalid_message: str = WORLD_INVALID_MESSAGE

  def user_message(self, inp: PromptInput) -> str:
    return f"Question: {search_r1_question(inp.question)}\n"

  def format_documents(self, hits: Sequence) -> str:
    return compact_docs(hits)
