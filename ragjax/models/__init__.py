"""ragjax.models."""
