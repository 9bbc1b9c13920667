"""`python -m ragjax.train [--config=FILE[:ARG]] [--config.FIELD=VALUE ...] [--gin_file F]`

With no arguments: the embedded default (`configs/world.py`), which learns to search in a
synthetic world on one CPU machine.  Any config field can be overridden on the command line;
`--gin_file` binds user-supplied components (a custom reward, retriever or protocol).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(_REPO, "configs", "world.py")

config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "experiment config (ml-collections)",
                                lock_config=True)
flags.DEFINE_multi_string("gin_file", [], "gin files binding user components")


def run(config) -> dict:
  from ragjax.parallel.distributed import maybe_initialize
  maybe_initialize()
  for path in flags.FLAGS.gin_file if flags.FLAGS.is_parsed() else []:
    import gin
    gin.parse_config_file(path)
  recipe = config.get("recipe", None) or config.get("method", None)
  if recipe == "world":
    from ragjax.recipes.world import run as run_world
    return run_world(config)
  if recipe == "search_r1":
    from ragjax.recipes.search_r1 import run as run_search_r1
    return run_search_r1(config)
  raise ValueError(f"config recipe/method {recipe!r} has no runner; known: 'world', 'search_r1'")


def main(argv):
  from absl import logging
  logging.set_verbosity(logging.WARNING)   # orbax logs every save at INFO
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  run(flags.FLAGS.config)


if __name__ == "__main__":
  if not os.path.exists(DEFAULT_CONFIG) and not any(a.startswith("--config") for a in sys.argv):
    sys.exit(f"the default config {DEFAULT_CONFIG} is missing; pass --config=FILE")
  app.run(main)
