"""Built-in rewards: answer metrics on the parsed answer, format validity, Search-R1's EM reward.
Each reads the row's record (`RewardContext`).  Method rewards have their own modules."""

from __future__ import annotations

from ragjax.metrics import cover_exact_match, exact_match, token_f1
from ragjax.rl.rewards.registry import RewardContext, register_reward
from ragjax.rl.rewards.tags import is_valid_search_r1_format


@register_reward("em")
def em_reward(ctx: RewardContext) -> float:
  """Exact match of the parsed answer against any gold alias (SQuAD normalisation).  Equal to
  `search_r1_em` at its default; that one also takes `format_score` (a wrong but present
  answer's reward), this one has no argument."""
  return 0.0 if ctx.answer is None else exact_match(ctx.answer, ctx.golden_answers)


@register_reward("f1")
def f1_reward(ctx: RewardContext) -> float:
  """Token F1 of the parsed answer, the best over the gold aliases."""
  return 0.0 if ctx.answer is None else token_f1(ctx.answer, ctx.golden_answers)


@register_reward("cover_em")
def cover_em_reward(ctx: RewardContext) -> float:
  """1 when a normalised gold alias occurs inside the normalised answer."""
  return 0.0 if ctx.answer is None else cover_exact_match(ctx.answer, ctx.golden_answers)


@register_reward("format")
def format_reward(ctx: RewardContext) -> float:
  """Search-R1's tag state machine over the response (policy text and its observations)."""
  return float(is_valid_search_r1_format(ctx.row.response_text))


@register_reward("search_r1_em")
def search_r1_em_reward(ctx: RewardContext, format_score: float = 0.0) -> float:
  """Search-R1 `qa_em.compute_score`: 1 on EM, `format_score` for a wrong but present answer.
  At the default `format_score=0` it equals `em`; the kwarg
  (`rl.reward_kwargs.search_r1_em.format_score`) is the one difference."""
  if ctx.answer is None:
    return 0.0
  return 1.0 if exact_match(ctx.answer, ctx.golden_answers) else float(format_score)
