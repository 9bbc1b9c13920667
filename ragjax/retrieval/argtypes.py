"""argparse types for counts, sizes and ports.

An out-of-range number on a command line is a usage error naming the flag (argparse prints
`argument --port: must be ...` and exits 2) instead of a silently wrong run: without these,
`--port 70000` listened on 4464 (uvicorn wraps the port to 16 bits) and `--batch 0` crashed
deep inside a loop.  Used by the retrieval and data command lines.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional


def _parse_int(text: str) -> int:
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def int_range(lo: Optional[int] = None, hi: Optional[int] = None) -> Callable[[str], int]:
  """An int in [lo, hi] (either end open when None)."""
  def parse(text: str) -> int:
    value = _parse_int(text)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
      if hi is None:
        raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
      if lo is None:
        raise argparse.ArgumentTypeError(f"must be <= {hi}, got {value}")
      raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {value}")
    return value
  return parse


def float_range(lo: float, hi: float) -> Callable[[str], float]:
  """A finite float in [lo, hi]."""
  def parse(text: str) -> float:
    try:
      value = float(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not lo <= value <= hi:        # also rejects nan
      raise argparse.ArgumentTypeError(f"must be in {lo:g}..{hi:g}, got {text}")
    return value
  return parse


positive_int = int_range(1)
non_negative_int = int_range(0)


def port(text: str) -> int:
  """A TCP port to bind: 1..65535, or 0 for any free port."""
  value = _parse_int(text)
  if not 0 <= value <= 65535:
    raise argparse.ArgumentTypeError(f"must be a TCP port in 1..65535 (or 0 for any free port), "
                                     f"got {value}")
  return value
