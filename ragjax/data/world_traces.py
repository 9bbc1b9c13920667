"""Search traces for the cold-start SFT of the embedded default (R3-RAG's recipe).

A trace is the list of turns the policy should emit for one world question: one
`<search> q </search>` per hop and a final `<answer> a </answer>`.  Some traces are imperfect
on purpose, as R3-RAG's cold-start data is: retry questions first try the obvious query (which
tends to land on a namesake, see `ragjax.data.world`), and a share of multi-hop traces start
with a wasted query (the question itself) before the right hops.  RL then has something to
improve on.  The traces are run through the real rollout engine with a `TeacherPolicy`
(`ragjax.rollout.teacher.teacher_traces`), so the observations are real retrieval results and
labels match RL rollouts exactly.  Examples are world records (`Example.to_record()` dicts).

With `refine=True` (AutoRefine's protocol at the world's scale) every turn after documents
opens with a `<refine>` block distilling them: the hop's answer for a hop query, "not found"
for a wasted or namesake query, as AutoRefine's policy is taught to write after each search.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence


def search_turn(query: str) -> str:
  return f"<search> {query} </search>"


def answer_turn(answer: str) -> str:
  return f"<answer> {answer} </answer>"


def refine_block(text: str) -> str:
  return f"<refine> {text} </refine> "


def trace_turns(ex: Mapping, rng: random.Random, wasted_query_rate: float = 0.15,
                refine: bool = False) -> list[str]:
  """The turns of one trace (see the module docstring)."""
  meta = ex.get("metadata") or {}
  hops = meta.get("hops") or []
  if not hops:
    raise ValueError(f"world question {ex.get('id')} has no hop chain in metadata")
  queries = [h["query"] for h in hops]
  found = [str(h.get("answer", "")) or "not found" for h in hops]
  if meta.get("qtype") == "retry" and meta.get("first_query"):
    queries, found = [meta["first_query"]] + queries, ["not found"] + found
  elif len(hops) > 1 and rng.random() < wasted_query_rate:
    queries, found = [ex["question"].rstrip("?")] + queries, ["not found"] + found
  turns = [search_turn(q) for q in queries] + [answer_turn(ex["golden_answers"][0])]
  if refine:   # every turn after documents distils the previous search's result first
    turns = turns[:1] + [refine_block(f) + t for f, t in zip(found, turns[1:])]
  return turns


def make_scripts(examples: Sequence[Mapping], seed: int, wasted_query_rate: float = 0.15,
                 refine: bool = False) -> list[list[str]]:
  rng = random.Random(f"ragjax-traces-{seed}")
  return [trace_turns(ex, rng, wasted_query_rate, refine) for ex in examples]
