"""ragjax: JAX-native reinforcement learning for LLMs that reason and search."""

__version__ = "0.1.0"
