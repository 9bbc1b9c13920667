"""Rewards: SQuAD metrics, tag parsing, the named registry and the built-in rewards."""

from ragjax.rl.rewards import builtin  # noqa: F401  (registers the built-ins)
from ragjax.rl.rewards.normalize import (cover_exact_match, exact_match, normalize_answer,
                                         token_f1)
from ragjax.rl.rewards.registry import (RewardResult, combine_rewards, get_reward,
                                        register_reward, registered_rewards, user_rewards)
from ragjax.rl.rewards.tags import extract_answers, is_valid_search_r1_format, last_answer
