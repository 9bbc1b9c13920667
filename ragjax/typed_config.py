"""Typed dataclasses from ml-collections ConfigDicts, with errors that name the field.

The ConfigDict in `configs/*.py` is what users edit and override on the command line; the
frozen dataclasses each package defines (`SamplerConfig`, `RLConfig`, `WorldConfig`, ...) are
what the code reads.  An unknown or misspelt field is an error naming its full path, never
silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from typing import Any, Mapping


def _is_dataclass_type(tp) -> bool:
  return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def from_dict(cls, data: Mapping[str, Any], path: str = "", **overrides):
  """Builds dataclass `cls` from a (nested) mapping plus `overrides`; unknown fields raise
  naming the path (e.g. `sampler.temprature`)."""
  if hasattr(data, "to_dict"):
    data = data.to_dict()
  if not isinstance(data, Mapping):
    raise TypeError(f"config {path or cls.__name__} must be a mapping, got {type(data).__name__}")
  data = {**data, **overrides}
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - set(fields))
  if unknown:
    where = ", ".join(f"{path}.{k}" if path else k for k in unknown)
    raise ValueError(f"unknown config field(s) {where}; {cls.__name__} knows: {sorted(fields)}")
  hints = typing.get_type_hints(cls)
  kw = {}
  for name, value in data.items():
    tp = hints.get(name)
    if typing.get_origin(tp) is typing.Union:   # Optional[SomeConfig]
      inner = [a for a in typing.get_args(tp) if a is not type(None)]
      tp = inner[0] if len(inner) == 1 else tp
    if value is not None and _is_dataclass_type(tp):
      value = from_dict(tp, value, f"{path}.{name}" if path else name)
    elif hasattr(value, "to_dict"):
      value = value.to_dict()
    elif isinstance(value, list):
      value = tuple(value)
    kw[name] = value
  try:
    return cls(**kw)
  except (TypeError, ValueError) as e:
    if not path or str(e).startswith(path) or type(e) not in (TypeError, ValueError):
      raise
    raise type(e)(f"{path}: {e}") from None


def defaults(cls, fields=None, exclude=()) -> dict[str, Any]:
  """A typed config's fields and their defaults, as a config section (`configs/common.py`
  builds its sections from these: the defaults live in one place).  `fields`: only these
  (None: all); `exclude`: not these (fields the code sets, not the config)."""
  known = [f.name for f in dataclasses.fields(cls)]
  unknown = sorted(set(fields or ()) - set(known))
  if unknown:
    raise ValueError(f"{cls.__name__} has no field(s) {unknown}; known: {known}")
  out = {}
  for f in dataclasses.fields(cls):
    if (fields is not None and f.name not in fields) or f.name in exclude:
      continue
    if f.default is not dataclasses.MISSING:
      out[f.name] = f.default
    elif f.default_factory is not dataclasses.MISSING:
      out[f.name] = f.default_factory()
    else:
      raise TypeError(f"{cls.__name__}.{f.name} has no default")
  return out


def optional_type(cls, name: str):
  """The type of `cls`'s field `name` when it is `Optional[int | float | str | bool]` (for a
  config placeholder: a field that may be None and is set from the command line), else None."""
  tp = typing.get_type_hints(cls).get(name)
  if typing.get_origin(tp) is typing.Union:
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(inner) == 1 and inner[0] in (int, float, str, bool):
      return inner[0]
  return None


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{'rl': {'kl_coef': 0.1}} -> {'rl.kl_coef': 0.1}; used for logging and fingerprints."""
  if hasattr(data, "to_dict"):
    data = data.to_dict()
  out = {}
  for k, v in data.items():
    key = f"{prefix}.{k}" if prefix else str(k)
    if hasattr(v, "to_dict"):
      v = v.to_dict()
    if isinstance(v, Mapping) and v:
      out.update(flatten(v, key))
    else:
      out[key] = list(v) if isinstance(v, tuple) else v
  return out


def json_safe(x):
  """`x` as plain JSON values (tuples -> lists, numpy scalars -> numbers), for comparisons of
  configs written to and read back from disk."""
  return json.loads(json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def read_json(path: str):
  with open(path) as f:
    return json.load(f)


def write_json_atomic(path: str, data) -> None:
  """Written to a temp file then renamed, so a kill never leaves half a file."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(data, f, indent=1)
  os.replace(tmp, path)
