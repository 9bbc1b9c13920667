"""Rewards: the registry interface (`RewardContext`, `combine_rewards`), tag parsing and the
built-in rewards.  Answer metrics live in `ragjax.metrics`."""

from ragjax.rl.rewards import autorefine, builtin, r3_rag, rezero, ur2  # noqa: F401  (register the rewards)
from ragjax.rl.rewards.registry import (RewardContext, RewardResult, batched_reward,
                                        combine_rewards, get_reward, register_reward,
                                        registered_rewards, score_rows)
from ragjax.rl.rewards.tags import is_valid_search_r1_format

__all__ = ["RewardContext", "RewardResult", "batched_reward", "combine_rewards", "get_reward",
           "is_valid_search_r1_format", "register_reward", "registered_rewards", "score_rows"]
