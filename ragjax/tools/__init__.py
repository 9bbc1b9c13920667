"""ragjax.tools."""
