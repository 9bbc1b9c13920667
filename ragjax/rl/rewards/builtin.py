"""Built-in rewards: answer metrics on the parsed answer, format validity, Search-R1's EM reward.
Each reads the row's record (`RewardContext`).  Method rewards have their own modules."""

from __future__ import annotations

import re

from ragjax import registry
from ragjax.metrics import cover_exact_match, exact_match, token_f1
from ragjax.rl.rewards.context import RewardContext
from ragjax.rl.rewards.tags import is_valid_search_r1_format


@registry.register("reward", "em")
def em_reward(ctx: RewardContext) -> float:
  """Exact match of the parsed answer against any gold alias (SQuAD normalisation).  Equal to
  `search_r1_em` at its default; that one also takes `format_score` (a wrong but present
  answer's reward), this one has no argument."""
  return 0.0 if ctx.answer is None else exact_match(ctx.answer, ctx.golden_answers)


@registry.register("reward", "f1")
def f1_reward(ctx: RewardContext) -> float:
  """Token F1 of the parsed answer, the best over the gold aliases."""
  return 0.0 if ctx.answer is None else token_f1(ctx.answer, ctx.golden_answers)


@registry.register("reward", "cover_em")
def cover_em_reward(ctx: RewardContext) -> float:
  """1 when a normalised gold alias occurs inside the normalised answer."""
  return 0.0 if ctx.answer is None else cover_exact_match(ctx.answer, ctx.golden_answers)


@registry.register("reward", "format")
def format_reward(ctx: RewardContext) -> float:
  """Search-R1's tag state machine over the response (policy text and its observations)."""
  return float(is_valid_search_r1_format(ctx.row.response_text))


@registry.register("reward", "search_r1_em")
def search_r1_em_reward(ctx: RewardContext, format_score: float = 0.0) -> float:
  """Search-R1 `qa_em.compute_score`: 1 on EM, `format_score` for a wrong but present answer.
  At the default `format_score=0` it equals `em`; the kwarg
  (`rl.reward_kwargs.search_r1_em.format_score`) is the one difference."""
  if ctx.answer is None:
    return 0.0
  return 1.0 if exact_match(ctx.answer, ctx.golden_answers) else float(format_score)


_INFORMATION = re.compile(r"<information>(.*?)</information>", re.DOTALL)


def answer_retrieved(response: str, golden_answers) -> bool:
  """Search-R1 `is_retrieval_correct`: a normalised gold alias occurs in a normalised
  `<information>` block of the response (cover EM of each block; an alias that normalises to ""
  never counts)."""
  return any(cover_exact_match(b, golden_answers) for b in information_blocks(response))


def information_blocks(response: str) -> list[str]:
  """The text of each `<information>` block of a response, in order."""
  return _INFORMATION.findall(response)


@registry.register("reward", "search_r1_format")
def search_r1_format_reward(ctx: RewardContext, structure_format_score: float = 0.2,
                            final_format_score: float = 0.1, retrieval_score: float = 0.0,
                            search_required: bool = False) -> float:
  """Search-R1's format-aware EM reward (`qa_em_format.compute_score_em`, the v0.3
  `train_grpo_format.sh` recipe: structure 0.2, final 0.1, retrieval 0):

  | answer | well-formed | reward |
  |---|---|---|
  | EM | yes / no | 1 / 1 - structure |
  | wrong or none | yes | structure (+ retrieval when a gold alias is in an `<information>` block) |
  | wrong | no | final |
  | none | no | 0 |

  Well-formed is Search-R1's tag state machine; with `search_required` (not in Search-R1) a
  trajectory is well-formed only if it also searched at least once, so a format term cannot pay
  a policy for answering without retrieval."""
  response = ctx.row.response_text
  valid = is_valid_search_r1_format(response) and (not search_required
                                                   or ctx.row.num_searches > 0)
  if ctx.answer is not None and exact_match(ctx.answer, ctx.golden_answers):
    return 1.0 if valid else 1.0 - float(structure_format_score)
  if valid:
    return float(structure_format_score) + (
        float(retrieval_score) if answer_retrieved(response, ctx.golden_answers) else 0.0)
  return 0.0 if ctx.answer is None else float(final_format_score)


def gold_titles(example) -> set:
  """The titles of an example's supporting passages (HotpotQA / 2Wiki `supporting_facts`, as
  FlashRAG metadata carries them); empty when the data names none."""
  facts = (example.get("metadata") or {}).get("supporting_facts") or []
  return {str(f[0]) for f in facts if isinstance(f, (list, tuple)) and f}


def passage_title(contents: str) -> str:
  """The title of a passage in the FlashRAG / Search-R1 corpus format ('"Title"\\ntext')."""
  return contents.partition("\n")[0].strip().strip('"')


def search_stats(row, example) -> dict:
  """One trajectory's search behaviour: searched (at least once), searches, a valid Search-R1
  format (the tag state machine), answered (an answer was parsed), and gold_recall: the share
  of the example's supporting titles among the titles its searches retrieved (None when the
  example names no supporting passage)."""
  gold = gold_titles(example)
  seen = {passage_title(t) for docs in row.doc_texts for t in docs}
  return {"searched": float(row.num_searches > 0), "searches": float(row.num_searches),
          "valid_format": float(is_valid_search_r1_format(row.response_text)),
          "answered": float(row.answer is not None),
          "gold_recall": len(gold & seen) / len(gold) if gold else None}


@registry.register("metric", "search_r1")
def search_r1_metrics(rows, examples) -> dict:
  """search_rate, valid_format, answered and gold_recall (over examples that name supporting
  passages) of the step's trajectories."""
  stats = [search_stats(row, ex) for row, ex in zip(rows, examples)]
  n = max(len(stats), 1)
  out = {k: sum(s[k] for s in stats) / n for k in ("searched", "valid_format", "answered")}
  recalls = [s["gold_recall"] for s in stats if s["gold_recall"] is not None]
  out["search_rate"] = out.pop("searched")
  if recalls:
    out["gold_recall"] = sum(recalls) / len(recalls)
  return out
