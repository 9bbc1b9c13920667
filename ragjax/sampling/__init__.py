"""ragjax.sampling."""
