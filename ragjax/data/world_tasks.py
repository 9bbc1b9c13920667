"""UR²'s three tasks on the synthetic world, so its curriculum and task mixing run on one CPU
machine: open-domain QA (the world's own questions, which need search), multiple choice (the
same kind of question with the gold answer among distractors) and arithmetic (questions that
need no search, UR²'s easy math).

    splits = world_task_splits(world.questions, seed=0, mcq_fraction=0.5, math_fraction=0.5)

Every record gets a `task` (qa / mcq / math) and keeps the world's `metadata` (hop chain,
question type; multiple choice is qtype "mcq" with the original in `source_qtype`, arithmetic
is qtype "arithmetic", so evaluation tables show each task).  Multiple-choice options are the
gold answer and up to `options - 1` gold answers of other questions whose last hop has the same
relation (other towns for a "where" question, other years for a "when"); yes/no comparison
questions stay QA.  `ur2_trace_turns` writes a cold-start trace in UR²'s grammar: the world's
trace (`ragjax.data.world_traces`) with `<|begin_of_query|> q <|end_of_query|>` queries (for a
sample prompted with retrieval; the sum itself for arithmetic), then `\\boxed{answer}` or
"the correct answer is: X".
"""

from __future__ import annotations

import random
import string
from typing import Mapping, Sequence

from ragjax.data.world_traces import TraceShares, trace_turns

ARITHMETIC = "arithmetic"


def _relation(rec: Mapping) -> str:
  hops = (rec.get("metadata") or {}).get("hops") or []
  return hops[-1].get("relation", "") if hops else ""


def mcq_records(records: Sequence[Mapping], rng: random.Random, n: int, options: int = 4
                ) -> list[dict]:
  """Up to `n` multiple-choice versions of non-comparison `records` (see the module docstring)."""
  by_rel: dict[str, list[str]] = {}
  for r in records:
    if (r.get("metadata") or {}).get("qtype") != "comparison":
      answers = by_rel.setdefault(_relation(r), [])
      if r["golden_answers"][0] not in answers:
        answers.append(r["golden_answers"][0])
  pool = [r for r in records if (r.get("metadata") or {}).get("qtype") != "comparison"
          and len(by_rel[_relation(r)]) > 1]
  out = []
  for r in rng.sample(pool, min(n, len(pool))):
    gold = r["golden_answers"][0]
    others = [a for a in by_rel[_relation(r)] if a != gold]
    opts = rng.sample(others, min(options - 1, len(others))) + [gold]
    rng.shuffle(opts)
    meta = dict(r.get("metadata") or {})
    meta.update(answer_text=gold, qtype="mcq", source_qtype=meta.get("qtype"))
    out.append(dict(r, id=f"mcq_{r['id']}", options=opts,
                    golden_answers=[string.ascii_uppercase[opts.index(gold)]], task="mcq",
                    metadata=meta))
  return out


def math_records(split: str, n: int, rng: random.Random) -> list[dict]:
  """`n` sums of two two-digit numbers ("What is 37 plus 48?" -> "85")."""
  out = []
  for i in range(n):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    out.append({"id": f"math_{split}_{i}", "question": f"What is {a} plus {b}?",
                "golden_answers": [str(a + b)], "options": [], "supporting_ids": [],
                "supporting_titles": [], "data_source": "ragjax_world_math", "task": "math",
                "metadata": {"qtype": ARITHMETIC, "a": a, "b": b}})
  return out


def world_task_splits(splits: Mapping[str, Sequence[Mapping]], *, seed: int,
                      mcq_fraction: float = 0.5, math_fraction: float = 0.5,
                      options: int = 4) -> dict[str, list[dict]]:
  """Each split's world questions as QA, plus multiple-choice and arithmetic questions
  (`*_fraction` x the split's size), seeded per split."""
  for name, f in (("mcq_fraction", mcq_fraction), ("math_fraction", math_fraction)):
    if not 0 <= f <= 10:
      raise ValueError(f"{name} must be in [0, 10], got {f}")
  out = {}
  for split, recs in splits.items():
    rng = random.Random(f"ur2-world-tasks:{seed}:{split}")
    qa = [dict(r, task="qa") for r in recs]
    mcq = mcq_records(qa, rng, round(mcq_fraction * len(qa)), options)
    out[split] = qa + mcq + math_records(split, round(math_fraction * len(qa)), rng)
  return out


def ur2_search(query: str) -> str:
  return f"<|begin_of_query|> {query} <|end_of_query|>"


def ur2_trace_turns(rec: Mapping, rng: random.Random, shares: TraceShares = TraceShares()
                    ) -> list[str]:
  """The turns of one cold-start trace in UR²'s grammar (see the module docstring): the
  world's trace for the question (`ragjax.data.world_traces`, with its decision shares) with
  UR²'s query tags and answer, or, prompted without retrieval, the answer alone."""
  task, meta = rec.get("task", "qa"), rec.get("metadata") or {}
  gold = rec["golden_answers"][0]
  if task == "math":      # a search (useless here) only teaches the format, as Stage 1 does
    a, b = meta["a"], meta["b"]
    return ([ur2_search(f"{a} plus {b}")] if rec.get("retrieval") else []) + \
        [f"{a} plus {b} is {gold}. \\boxed{{{gold}}}"]
  if task == "mcq":
    letter = lambda text: f"the correct answer is: {gold}"   # noqa: E731  (always the gold letter)
    if not rec.get("retrieval", True):
      return [letter(gold)]
    return trace_turns(rec, rng, shares, search=ur2_search, answer=letter)
  if not rec.get("retrieval", True):
    return [f"\\boxed{{{gold}}}"]
  return trace_turns(rec, rng, shares, search=ur2_search, answer=lambda a: f"\\boxed{{{a}}}")
