"""Experiment configs read outside the train command (benchmarks, test probes): a
`configs/<file>.py[:ARG]` spec and `section.field=value` overrides, as `python -m ragjax.train
--config=FILE:ARG --config.section.field=value` reads them."""

from __future__ import annotations

import ast
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
