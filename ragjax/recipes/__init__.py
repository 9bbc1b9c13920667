"""ragjax.recipes: one module per recipe (`run(config)`), each only wiring the packages;
`components` builds the shared parts from a config."""

import os

# The embedded default's config file, beside the package in a source checkout.
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "configs", "world.py")
