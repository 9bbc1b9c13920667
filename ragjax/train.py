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
from ml_collections import config_flags

from ragjax.errors import define_config_flag, flags_parser
from ragjax.recipes import DEFAULT_CONFIG

define_config_flag(DEFAULT_CONFIG)
flags.DEFINE_multi_string("gin_file", [], "gin files binding user components")
flags.DEFINE_bool("dry_run", False, "print the derived plan beside the paper's "
                  "(configs/paper_plans) and the per-device memory plan on --target, then exit "
                  "(exit 3 when it does not fit); builds nothing but shapes")
flags.DEFINE_string("target", None, "accelerator slice for --dry_run (h100x8, v5p-32, ...); "
                    "default: the config's `hardware`.  A real run refuses to start on a "
                    "CPU-only JAX when it names one (RAGJAX_EXPECT_BACKEND=cpu: on purpose)")


def recipe_module(config):
  name = config.get("recipe", None)
  try:
    return importlib.import_module(f"ragjax.recipes.{name}")
  except ModuleNotFoundError as e:
    if e.name != f"ragjax.recipes.{name}":
      raise
    from ragjax import recipes
    known = sorted(m[:-3] for m in os.listdir(os.path.dirname(recipes.__file__))
                   if m.endswith(".py") and "\ndef run(" in open(
                       os.path.join(os.path.dirname(recipes.__file__), m)).read())
    raise ValueError(f"config recipe {name!r} has no module ragjax/recipes/{name}.py; "
                     f"known: {known}") from None


def run(config) -> dict:
  from ragjax.parallel.backend import start
  from ragjax.parallel.cpu_threads import pin_config
  gin_files = flags.FLAGS.gin_file if flags.FLAGS.is_parsed() else []
  for path in gin_files:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"--gin_file {path}: no such file")
  pin_config(config)      # before JAX's CPU backend sizes its thread pool and reads its flags
  target = (flags.FLAGS.target if flags.FLAGS.is_parsed() else "") or config.get("hardware", "")
  start("ragjax.train", config, target=target, initialize=True)   # no CPU fallback of a GPU run
  for path in gin_files:
    import gin
    from ragjax import registry  # noqa: F401  (defines the gin-configurable `user_plugins`)
    try:
      gin.parse_config_file(path)
    except (SyntaxError, UnicodeDecodeError) as e:   # not a gin file: one line naming it
      msg = e.msg if isinstance(e, SyntaxError) else str(e)
      where = f" line {e.lineno}" if getattr(e, "lineno", None) else ""
      raise ValueError(f"--gin_file {path}{where}: not a gin file ({msg})") from None
  return recipe_module(config).run(config)


def main(argv):
  from absl import logging
  from ragjax.errors import exit_on_user_error
  logging.set_verbosity(logging.WARNING)   # orbax logs every save at INFO
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
  with exit_on_user_error("ragjax.train"):
    if flags.FLAGS.dry_run:
      sys.exit(dry_run(flags.FLAGS.config, flags.FLAGS.target,
                       config_flags.get_config_filename(flags.FLAGS["config"])))
    run(flags.FLAGS.config)


def dry_run(config, target: str = None, config_file: str = "") -> int:
  """The derived plan against the paper's, then the memory plan on `target` (default: the
  config's `hardware`; none: the memory plan is skipped)."""
  from ragjax.parallel.memory import parse_target
  from ragjax.planning.dry_run import memory_plan
  from ragjax.planning.plan import paper_values, plan_rows, plan_table, split_config_arg
  path, arg = split_config_arg(config_file or DEFAULT_CONFIG)
  plans, _ = paper_values(path, arg)
  print(plan_table(plan_rows(config, path, arg),
                   f"plan of {path}:{arg or '(default)'}" + (
                       f" against the paper's ({os.path.relpath(plans)})" if plans else
                       " (no paper plan for this argument)")))
  print()
  name = target or config.get("hardware", "")
  if not name:
    print("memory plan skipped: give --target (e.g. h100x8, v5p-32) or set the config's "
          "`hardware`")
    return 0
  plan = memory_plan(config, parse_target(name))
  print(plan.table())
  return 0 if plan.fits else 3


if __name__ == "__main__":
  if not os.path.exists(DEFAULT_CONFIG) and not any(a.startswith("--config") for a in sys.argv):
    sys.exit(f"the default config {DEFAULT_CONFIG} is missing; pass --config=FILE")
  app.run(main, flags_parser=flags_parser("ragjax.train"))
