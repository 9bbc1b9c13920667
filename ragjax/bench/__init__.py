"""ragjax.bench."""
