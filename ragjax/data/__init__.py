"""ragjax.data."""
