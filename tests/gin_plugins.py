"""A user component bound through gin (`--gin_file tests/dense_reward.gin`), as a researcher
would add their own reward without touching ragjax."""

import gin


@gin.configurable
def vowel_share(ctx, scale: float = 1.0):
  """A dense reward (share of vowels in the policy's text), so a random policy gets signal."""
  text = ctx.row.policy_text.lower()
  return scale * sum(ch in "aeiou" for ch in text) / max(len(text), 1)
