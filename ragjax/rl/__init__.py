"""ragjax.rl."""
