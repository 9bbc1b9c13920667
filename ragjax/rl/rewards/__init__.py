"""Rewards: what a reward reads and how rewards are scored (`RewardContext`, `score_rows`), tag
parsing, and the built-in rewards (their modules here, registered in `ragjax.registry`; the
list of them is `ragjax.plugins`).  Answer metrics live in `ragjax.metrics`."""

from ragjax.rl.rewards.context import (RewardContext, RewardResult, batched_reward,
                                       combine_rewards, get_reward, registered_rewards,
                                       score_rows)
from ragjax.rl.rewards.tags import is_valid_search_r1_format

__all__ = ["RewardContext", "RewardResult", "batched_reward", "combine_rewards", "get_reward",
           "is_valid_search_r1_format", "registered_rewards", "score_rows"]
