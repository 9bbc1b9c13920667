"""A user component bound through gin (`--gin_file tests/dense_reward.gin`), as a researcher
would add their own reward without touching ragjax."""

import gin


@gin.configurable
def vowel_share(ctx, scale: float = 1.0):
  """A dense reward (share of vowels in the policy's text), so a random policy gets signal."""
  text = ctx.row.policy_text.lower()
  return scale * sum(ch in "aeiou" for ch in text) / max(len(text), 1)


@gin.configurable
def judge_reply_has_text(ctx):
  """Asks the run's `judge` service (ReZero's: the frozen base policy, in process) about the
  row, as ReZero's correctness reward does, and scores 1 when a reply came back."""
  chat = ctx.service("judge")
  reply = chat.complete([[{"role": "user", "content": "Is this a good search? Reply Yes or No. "
                                                      + ctx.row.policy_text[:80]}]],
                        max_tokens=4, temperature=0.1, top_p=0.95)[0]
  return float(isinstance(reply, str))
