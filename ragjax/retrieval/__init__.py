"""ragjax.retrieval."""
