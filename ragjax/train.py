"""`python -m ragjax.train [--config=FILE[:ARG]] [--config.FIELD=VALUE ...] [--gin_file F]`

With no arguments: the embedded default (`configs/world.py`), which learns to search in a
synthetic world on one CPU machine.  Any config field can be overridden on the command line;
`--gin_file` binds user-supplied components (a custom reward, hook or protocol).  The config's
`recipe` names the module that runs it: `ragjax.recipes.<recipe>.run(config)`.
"""

from __future__ import annotations

import importlib
import os
import sys

from absl import app, flags

from ragjax.errors import define_config_flag, flags_parser
from ragjax.recipes import DEFAULT_CONFIG

define_config_flag(DEFAULT_CONFIG)
flags.DEFINE_multi_string("gin_file", [], "gin files binding user components")
flags.DEFINE_bool("dry_run", False, "print the per-device memory plan on --target and exit "
                  "(exit 3 when it does not fit); builds nothing but shapes")
flags.DEFINE_string("target", None, "accelerator slice for --dry_run (h100x8, v5p-32, ...); "
                    "default: the config's `hardware`")


def recipe_module(config):
  name = config.get("recipe", None)
  try:
    return importlib.import_module(f"ragjax.recipes.{name}")
  except ModuleNotFoundError as e:
    if e.name != f"ragjax.recipes.{name}":
      raise
    from ragjax import recipes
    known = sorted(m[:-3] for m in os.listdir(os.path.dirname(recipes.__file__))
                   if m.endswith(".py") and m not in ("__init__.py", "components.py"))
    raise ValueError(f"config recipe {name!r} has no module ragjax/recipes/{name}.py; "
                     f"known: {known}") from None


def run(config) -> dict:
  from ragjax.parallel.cpu_threads import pin_config
  from ragjax.parallel.distributed import maybe_initialize
  gin_files = flags.FLAGS.gin_file if flags.FLAGS.is_parsed() else []
  for path in gin_files:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"--gin_file {path}: no such file")
  pin_config(config)      # before JAX's CPU backend sizes its thread pool and reads its flags
  maybe_initialize()
  for path in gin_files:
    import gin
    from ragjax import registry  # noqa: F401  (defines the gin-configurable `user_plugins`)
    gin.parse_config_file(path)
  return recipe_module(config).run(config)


def main(argv):
  from absl import logging
  from ragjax.errors import exit_on_user_error
  logging.set_verbosity(logging.WARNING)   # orbax logs every save at INFO
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
  with exit_on_user_error("ragjax.train"):
    if flags.FLAGS.dry_run:
      sys.exit(dry_run(flags.FLAGS.config, flags.FLAGS.target))
    run(flags.FLAGS.config)


def dry_run(config, target: str = None) -> int:
  from ragjax.parallel.memory import parse_target
  from ragjax.recipes.dry_run import memory_plan
  name = target or config.get("hardware", "")
  if not name:
    raise ValueError("--dry_run needs --target (e.g. h100x8, v5p-32) or the config's `hardware`")
  plan = memory_plan(config, parse_target(name))
  print(plan.table())
  return 0 if plan.fits else 3


if __name__ == "__main__":
  if not os.path.exists(DEFAULT_CONFIG) and not any(a.startswith("--config") for a in sys.argv):
    sys.exit(f"the default config {DEFAULT_CONFIG} is missing; pass --config=FILE")
  app.run(main, flags_parser=flags_parser("ragjax.train"))
