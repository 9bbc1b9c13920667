"""Experiment configs read outside the train command (benchmarks, test probes): a
`configs/<file>.py[:ARG]` spec and `section.field=value` overrides, as `python -m ragjax.train
--config=FILE:ARG --config.section.field=value` reads them."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sibling(config_file: str, name: str):
  """The config module `name` beside `config_file` (e.g. `configs/common.py` for a config in
  `configs/`), loaded once by its path, so configs import each other without editing sys.path:

      common = sibling(__file__, "common")
  """
  folder = os.path.dirname(os.path.abspath(config_file))
  key = f"ragjax_configs_{hashlib.sha1(folder.encode()).hexdigest()[:12]}.{name}"
  if key not in sys.modules:
    path = os.path.join(folder, f"{name}.py")
    if not os.path.exists(path):
      raise FileNotFoundError(f"{config_file} imports {name!r}: no file {path}")
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
      spec.loader.exec_module(module)
    except BaseException:
      del sys.modules[key]
      raise
  return sys.modules[key]


def load_config(spec: str):
  """`FILE.py[:ARG]`, relative to the repository or absolute."""
  file, _, arg = spec.partition(":")
  path = file if os.path.isabs(file) else os.path.join(REPO, file)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no config file {path}")
  module_spec = importlib.util.spec_from_file_location("ragjax_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if not callable(getattr(module, "get_config", None)):
    raise ValueError(f"config file {path} defines no get_config()")
  return module.get_config(arg) if arg else module.get_config()


def apply_overrides(c, overrides):
  """`section.field=value` for each override (a Python literal, else a string)."""
  for ov in overrides:
    key, sep, value = ov.partition("=")
    if not sep:
      raise ValueError(f"an override is FIELD=VALUE, got {ov!r}")
    try:
      value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      pass
    node = c
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    if leaf not in node:
      raise ValueError(f"override {key}: the config has no field {leaf!r} there")
    node[leaf] = value
  return c
