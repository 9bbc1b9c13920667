"""Rewards: the registry interface (`RewardContext`, `combine_rewards`), tag parsing and the
built-in rewards.  Answer metrics live in `ragjax.metrics`."""

from ragjax.rl.rewards import builtin, ur2  # noqa: F401  (register the rewards)
from ragjax.rl.rewards.registry import (RewardContext, RewardResult, combine_rewards, get_reward,
                                        register_reward, registered_rewards)
from ragjax.rl.rewards.tags import is_valid_search_r1_format

__all__ = ["RewardContext", "RewardResult", "combine_rewards", "get_reward",
           "is_valid_search_r1_format", "register_reward", "registered_rewards"]
