"""Built-in rewards: answer metrics on the response span, format validity, Search-R1's EM reward."""

from __future__ import annotations

from typing import Optional

from ragjax.rl.rewards.normalize import cover_exact_match, exact_match, token_f1
from ragjax.rl.rewards.registry import register_reward
from ragjax.rl.rewards.tags import is_valid_search_r1_format, last_answer

# A response may hold at most this many <answer> blocks before it scores zero (the Search-R1
# rollout cuts a turn at the first </answer>, so honest responses hold one).
DEFAULT_MAX_ANSWER_TAGS = 1


def _answer(response, max_answer_tags):
  return last_answer(response, max_answer_tags)


@register_reward("em")
def em_reward(response, golden_answers, metadata, max_answer_tags: Optional[int] = DEFAULT_MAX_ANSWER_TAGS):
  ans = _answer(response, max_answer_tags)
  return 0.0 if ans is None else exact_match(ans, golden_answers)


@register_reward("f1")
def f1_reward(response, golden_answers, metadata, max_answer_tags: Optional[int] = DEFAULT_MAX_ANSWER_TAGS):
  ans = _answer(response, max_answer_tags)
  return 0.0 if ans is None else token_f1(ans, golden_answers)


@register_reward("cover_em")
def cover_em_reward(response, golden_answers, metadata,
                    max_answer_tags: Optional[int] = DEFAULT_MAX_ANSWER_TAGS):
  ans = _answer(response, max_answer_tags)
  return 0.0 if ans is None else cover_exact_match(ans, golden_answers)


@register_reward("format")
def format_reward(response, golden_answers, metadata):
  return float(is_valid_search_r1_format(response))


@register_reward("search_r1_em")
def search_r1_em_reward(response, golden_answers, metadata, format_score: float = 0.0,
                        max_answer_tags: Optional[int] = DEFAULT_MAX_ANSWER_TAGS):
  """Search-R1 `qa_em.compute_score`: 1 on EM, `format_score` for a wrong but present answer."""
  ans = _answer(response, max_answer_tags)
  if ans is None:
    return 0.0
  return 1.0 if exact_match(ans, golden_answers) else float(format_score)


@register_reward("refine_cover_em")
def refine_cover_em_reward(response, golden_answers, metadata):
  """AutoRefine's retrieval reward: a gold alias inside the refine text the rollout recorded."""
  refine = metadata.get("refine_text")
  if refine is None:
    raise KeyError("metadata has no 'refine_text' (the rollout must record <refine> contents)")
  if not isinstance(refine, str):
    refine = " ".join(refine)
  return cover_exact_match(refine, golden_answers)
