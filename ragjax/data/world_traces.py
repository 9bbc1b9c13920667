"""Search traces for the cold-start SFT of the embedded default (R3-RAG's recipe).

A trace is the list of turns the policy should emit for one world question: one
`<search> q </search>` per hop and a final `<answer> a </answer>`.  The *skills* are always
demonstrated correctly: queries copy the question's names, answers copy a value the retrieved
passage states.  The *decisions* can be imperfect in configurable shares (`TraceShares`), the
way a base model's are, so RL has something to discover (what the seed papers say RL teaches):
  - `no_search`: answer at once, without searching (with a plausible wrong value: a decoy's,
    the bridge entity, or the other yes/no);
  - `first_hop_stop`: a 2-hop question answered after its first hop, with the bridge entity;
  - `give_up`: a retry question answered after the failed first search, with the namesake's
    value that search found, instead of retrying with the disambiguated query;
  - `wasted_query`: a multi-hop trace that first searches the question itself (still right);
  - `answer_miss`: a trace that searched as it should, then answered with a plausible wrong
    value (drawn apart from the decisions above, so independent of what the search found).
Retry traces otherwise first try the obvious query (which tends to land on a namesake, see
`ragjax.data.world`), then retry.  The traces are run through the real rollout engine with a
`TeacherPolicy` (`ragjax.rl.teacher_traces`), so the observations are real
retrieval results and labels match RL rollouts exactly.  Examples are world records
(`Example.to_record()` dicts).

With `refine=True` (AutoRefine's protocol at the world's scale) every turn after documents
opens with a `<refine>` block distilling them, as AutoRefine's policy is taught to write after
each search: the value the search found (a hop's answer, or the namesake's for a retry's
first query), or "not found" for the question searched as a whole.  `refine_miss_rate`: each
block after a search that found its value says "not found" instead in that share, drawn apart
from the answer, so a trace's answer does not depend on its refine block (the answer reads the
documents; AutoRefine's third signature world, configs/signatures.py).

With `quote=True` (`with_quotes`, the embedded default) every turn after documents opens with
Search-R1's `<think>` block quoting the passage's sentence that states the value found, so the
answer or the next query copies a value from a few tokens back instead of looking it up.

Counterfactual answers (`swap_answers` with `AnswerSwapRetriever`): in a share of the entity
questions the final value is replaced by another training question's value of the same
relation, in the demonstrated answer and in every passage the trace retrieves.  A policy
trained from scratch otherwise learns to recall the training worlds' facts (the passages it
reads say the same thing every time) instead of reading the value off the passage, which is
what the test world needs; in a swapped trace recall is wrong and only reading is right.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import re
from typing import Mapping, Optional, Sequence

from ragjax.retrieval.types import Hit


def search_turn(query: str) -> str:
  return f"<search> {query} </search>"


def answer_turn(answer: str) -> str:
  return f"<answer> {answer} </answer>"


@dataclasses.dataclass(frozen=True)
class TraceShares:
  """Shares of demonstrations with an imperfect decision (see the module docstring)."""
  wasted_query_rate: float = 0.15
  no_search_rate: float = 0.0
  first_hop_stop_rate: float = 0.0
  give_up_rate: float = 0.0
  answer_miss_rate: float = 0.0
  refine_miss_rate: float = 0.0     # (read by `with_refine`, not by `trace_turns`)

  def __post_init__(self):
    for f in dataclasses.fields(self):
      v = getattr(self, f.name)
      if not 0.0 <= v <= 1.0:
        raise ValueError(f"traces.{f.name} must be in [0, 1], got {v}")


def wrong_answer(ex: Mapping) -> str:
  """A plausible wrong answer for a no-search demonstration."""
  meta = ex.get("metadata") or {}
  gold = ex["golden_answers"][0]
  if meta.get("qtype") == "comparison":
    return "no" if gold == "yes" else "yes"
  if meta.get("decoy_answers"):
    return meta["decoy_answers"][0]
  hops = meta.get("hops") or []
  if len(hops) > 1:
    return hops[0]["answer"]          # the bridge entity instead of what it leads to
  return hops[0]["entity"].split(" (")[0] if hops else gold


def trace_turns(ex: Mapping, rng: random.Random, shares: TraceShares = TraceShares(), *,
                search=search_turn, answer=answer_turn) -> list[str]:
  """The turns of one trace (see the module docstring).  One draw decides the trace's kind,
  so the shares are of all traces of that question type.  `search(query)` and
  `answer(text)` write the turns (another protocol's grammar: UR²'s world tasks)."""
  meta = ex.get("metadata") or {}
  hops = meta.get("hops") or []
  if not hops:
    raise ValueError(f"world question {ex.get('id')} has no hop chain in metadata")
  gold = ex["golden_answers"][0]
  qtype = meta.get("qtype")
  queries = [h["query"] for h in hops]
  # one draw for the decision, only when some decision share is set (so the default traces
  # draw exactly what they always drew)
  decide = shares.no_search_rate or shares.first_hop_stop_rate or shares.give_up_rate
  u = rng.random() if decide else 1.0
  if u < shares.no_search_rate:
    return [answer(wrong_answer(ex))]
  u -= shares.no_search_rate
  if qtype == "retry" and meta.get("first_query"):
    if u < shares.give_up_rate and meta.get("decoy_answers"):
      return [search(meta["first_query"]), answer(meta["decoy_answers"][0])]
    queries = [meta["first_query"]] + queries
  elif qtype == "2hop" and u < shares.first_hop_stop_rate:
    return [search(queries[0]), answer(hops[0]["answer"])]
  elif len(hops) > 1 and rng.random() < shares.wasted_query_rate:
    queries = [ex["question"].rstrip("?")] + queries
  if shares.answer_miss_rate and rng.random() < shares.answer_miss_rate:
    gold = wrong_answer(ex)
  return [search(q) for q in queries] + [answer(gold)]


def refine_block(text: str) -> str:
  return f"<refine> {text} </refine> "


def think_block(text: str) -> str:
  return f"<think> {text} </think> "


def found_values(ex: Mapping) -> dict[str, tuple[str, Optional[str]]]:
  """{query: (the value its search finds, the id of the passage stating it)} for the queries a
  trace of `ex` can make: each hop's, and a retry's first query (it lands on the namesake)."""
  meta = ex.get("metadata") or {}
  found = {h["query"]: (str(h["answer"]), (h.get("passage_ids") or [None])[0])
           for h in meta.get("hops") or []}
  if meta.get("first_query") and meta.get("decoy_answers"):
    found.setdefault(meta["first_query"], (str(meta["decoy_answers"][0]),
                                           (meta.get("decoy_passage_ids") or [None])[0]))
  return found


def after_searches(turns: Sequence[str], opener) -> list[str]:
  """The trace with every turn that follows a search opened by `opener(query)` (None or ""
  leaves the turn as it is)."""
  out = list(turns[:1])
  for prev, turn in zip(turns, turns[1:]):
    query = prev[len("<search> "):-len(" </search>")] if prev.startswith("<search>") else None
    head = opener(query) if query is not None else None
    out.append(head + turn if head else turn)
  return out


def with_refine(ex: Mapping, turns: Sequence[str], rng: Optional[random.Random] = None,
                miss_rate: float = 0.0) -> list[str]:
  """The trace with a `<refine>` block opening every turn that follows a search: the value
  the search found, or "not found" (for a search that found no value, and, drawing from `rng`,
  for a `miss_rate` share of those that did)."""
  found = found_values(ex)

  def block(q):
    missed = q in found and miss_rate and rng.random() < miss_rate
    return refine_block(found[q][0] if q in found and not missed else "not found")
  return after_searches(turns, block)


def stating_sentence(text: str, value: str) -> Optional[str]:
  """The first sentence of a passage that states `value` (as a whole word or phrase)."""
  for sentence in re.split(r"(?<=\.)\s+", text.strip()):
    if re.search(rf"(?<!\w){re.escape(value)}(?!\w)", sentence):
      return sentence
  return None


def with_quotes(ex: Mapping, turns: Sequence[str], passages: Mapping[str, str]) -> list[str]:
  """The trace with every turn that follows a search opened by Search-R1's `<think>` block
  quoting the sentence that states the value the search found (from `passages`: {id: text};
  a swapped example's quote states its swapped value, as its passages do).  Quoting first
  turns reading a value off a passage into copying: the sentence is found by its subject (the
  name the query copied) and continued, and the answer or the next query copies the value
  from a few tokens back.  A search with no such sentence (the question searched whole) is
  left unquoted."""
  found = found_values(ex)
  meta = ex.get("metadata") or {}
  swap = meta.get("answer_swap")
  last = (meta.get("hops") or [{}])[-1].get("query")

  def quote(query):
    value, pid = found.get(query, (None, None))
    if value is None or pid not in passages:
      return None
    if swap and query == last:
      sentence = stating_sentence(passages[pid], swap[0])
      sentence = sentence and replace_value(sentence, *swap)
    else:
      sentence = stating_sentence(passages[pid], value)
    return think_block(sentence) if sentence else None
  return after_searches(turns, quote)


def make_scripts(examples: Sequence[Mapping], seed: int, shares: TraceShares = TraceShares(),
                 refine: bool = False, quote: bool = False,
                 passages: Optional[Mapping[str, str]] = None) -> list[list[str]]:
  """One trace per example (`trace_turns`); `refine`: AutoRefine's `<refine>` blocks;
  `quote`: `<think>` blocks quoting the passages (`with_quotes`, needs `passages`)."""
  if quote and passages is None:
    raise ValueError("traces.quote needs the world's passages ({id: text})")
  rng = random.Random(f"ragjax-traces-{seed}")
  scripts = [trace_turns(ex, rng, shares) for ex in examples]
  if quote:
    scripts = [with_quotes(ex, t, passages) for ex, t in zip(examples, scripts)]
  if not refine:
    return scripts
  return [with_refine(ex, t, rng, shares.refine_miss_rate) for ex, t in zip(examples, scripts)]


def swap_answers(examples: Sequence[Mapping], rate: float, seed: int) -> list[Mapping]:
  """The examples with a `rate` share of the entity questions given a counterfactual final
  value: another example's value of the same final relation (so of the same kind: a year, a
  town, a person), in `golden_answers` (aliases follow) and `hops[-1]["answer"]`, and the
  pair `metadata["answer_swap"] = [old, new]` that `AnswerSwapRetriever` applies to the
  passages.  Yes/no comparisons and relations with a single value are left as they are."""
  if not 0.0 <= rate <= 1.0:
    raise ValueError(f"traces.swap_answer_rate must be in [0, 1], got {rate}")
  if rate == 0.0:
    return list(examples)
  rng = random.Random(f"ragjax-swap-{seed}")
  values: dict[str, list[str]] = {}
  for ex in examples:
    hops = (ex.get("metadata") or {}).get("hops") or []
    if hops and ex["metadata"].get("qtype") != "comparison":
      values.setdefault(hops[-1].get("relation"), []).append(str(ex["golden_answers"][0]))
  pools = {rel: sorted(set(v)) for rel, v in values.items()}
  out = []
  for ex in examples:
    meta = ex.get("metadata") or {}
    hops = meta.get("hops") or []
    old = str(ex["golden_answers"][0]) if ex.get("golden_answers") else ""
    taken = {old, *map(str, meta.get("decoy_answers") or ()), *(str(h["answer"]) for h in hops)}
    pool = [v for v in pools.get(hops[-1].get("relation"), ()) if v not in taken] if hops else []
    if meta.get("qtype") == "comparison" or not pool or rng.random() >= rate:
      out.append(ex)
      continue
    new = rng.choice(pool)
    ex = copy.deepcopy(dict(ex))
    ex["golden_answers"] = [replace_value(str(a), old, new) for a in ex["golden_answers"]]
    ex["metadata"]["hops"][-1]["answer"] = new
    ex["metadata"]["answer_swap"] = [old, new]
    out.append(ex)
  return out


def replace_value(text: str, old: str, new: str) -> str:
  """`old` replaced by `new` where it stands as a whole word or phrase."""
  return re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", lambda _: new, text)


class AnswerSwapRetriever:
  """Wraps a retriever for scripted traces of `swap_answers` examples: every passage retrieved
  for a swapped example states the swapped value (the engine passes each query's record:
  `needs_records`)."""

  needs_records = True

  def __init__(self, inner):
    self.inner = inner

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return self.inner.search(queries, k)

  def search_with_context(self, queries: Sequence[str], k: int,
                          records: Optional[Sequence[Optional[Mapping]]] = None,
                          **contexts) -> list[list[Hit]]:
    if contexts and hasattr(self.inner, "search_with_context"):
      results = self.inner.search_with_context(queries, k, **contexts)
    else:
      results = self.inner.search(queries, k)
    out = []
    for i, hits in enumerate(results):
      rec = records[i] if records is not None and i < len(records) else None
      swap = ((rec or {}).get("metadata") or {}).get("answer_swap")
      out.append([Hit(h.id, replace_value(h.contents, *swap), h.score) for h in hits]
                 if swap else list(hits))
    return out
