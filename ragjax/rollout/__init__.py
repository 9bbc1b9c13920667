"""ragjax.rollout."""
