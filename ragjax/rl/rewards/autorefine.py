"""AutoRefine's reward (Eq. 3) and its per-step analysis metrics (seeds_rex_autorefine_r3.md §2.3).

    R = F1(answer, gold)    if F1 > 0
        refine_score (0.1)  if F1 = 0 and the concatenated <refine> text covers a gold alias
        0                   otherwise, and always when there is no <answer>

One reward, not a weighted sum: a partial F1 takes the first branch even when the refine text
also covers the answer.  F1 is the code's SQuAD token F1 (multiset overlap, max over aliases,
yes/no/noanswer must match); the retrieval test is the code's substring cover-EM over the
normalised, space-joined `<refine>` contents of the response.  `refine_score=0` is the
"w/o retrieval reward" ablation (Table 2).

The "autorefine" metric plug-in logs the paper's §3.3 analysis every step: search success (the
fraction of searches whose documents contain a gold answer), refine success (the same test on
each `<refine>` block) and searches per rollout.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ragjax import registry
from ragjax.metrics import cover_exact_match, token_f1
from ragjax.rl.rewards.context import RewardContext


def refine_texts(row, required: bool = True) -> list[str]:
  texts = row.extra.get("refine_texts")
  if texts is None:
    if required:
      raise KeyError("the row record has no 'refine_texts' (its protocol does not write "
                     "<refine> blocks; use protocol.name='autorefine')")
    return []
  return list(texts)


@registry.register("reward", "autorefine")
def autorefine_reward(ctx: RewardContext, refine_score: float = 0.1) -> float:
  """AutoRefine's Eq. 3: the answer's F1, else refine_score when a refine block holds the answer."""
  if ctx.answer is None:
    return 0.0
  f1 = token_f1(ctx.answer, ctx.golden_answers)
  if f1 > 0:
    return f1
  if refine_score:
    refine = " ".join(refine_texts(ctx.row))
    if cover_exact_match(refine, ctx.golden_answers):
      return float(refine_score)
  return 0.0


@registry.register("reward", "refine_cover_em")
def refine_cover_em_reward(ctx: RewardContext) -> float:
  """The retrieval reward alone (Eq. 2, the code's cover-EM): a gold alias inside the
  concatenated `<refine>` text."""
  return cover_exact_match(" ".join(refine_texts(ctx.row)), ctx.golden_answers)


@registry.register("metric", "autorefine")
def autorefine_metrics(rows: Sequence, examples: Sequence[Mapping]) -> dict[str, float]:
  """search_success, refine_success (0 when there was nothing to test), searches_per_rollout
  and refines_per_rollout over the step's trajectories."""
  searches = hits = refines = covered = 0
  for row, ex in zip(rows, examples):
    gold = ex["golden_answers"]
    for docs in row.doc_texts:
      searches += 1
      hits += cover_exact_match(" ".join(docs), gold) > 0
    for text in refine_texts(row, required=False):
      refines += 1
      covered += cover_exact_match(text, gold) > 0
  n = max(len(rows), 1)
  return {"search_success": hits / searches if searches else 0.0,
          "refine_success": covered / refines if refines else 0.0,
          "searches_per_rollout": searches / n, "refines_per_rollout": refines / n}
