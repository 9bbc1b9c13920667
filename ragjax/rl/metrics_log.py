"""The run's metrics log: one JSON line per step, kept consistent with the checkpoints.

A run killed at any point resumes from its last finished checkpoint; `truncate(step)` drops the
lines past that step (all of them when no checkpoint finished), so the log reads as one
uninterrupted run.  A torn last line (a kill mid-write) is dropped instead of breaking every
later resume, and the truncation rewrites the file atomically (temp file + rename).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Optional


class MetricsLog:
  def __init__(self, path: str):
    self.path = path

  def append(self, record: dict) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(record, sort_keys=True) + "\n")
      f.flush()

  def read(self) -> list[dict]:
    """Every well-formed record; a malformed line other than the last is reported."""
    if not os.path.exists(self.path):
      return []
    with open(self.path) as f:
      lines = [l for l in f.read().split("\n") if l.strip()]
    out = []
    for i, line in enumerate(lines):
      try:
        rec = json.loads(line)
      except json.JSONDecodeError:
        if i != len(lines) - 1:
          warnings.warn(f"{self.path}: line {i + 1} is not JSON; dropped", stacklevel=2)
        continue
      if isinstance(rec, dict) and isinstance(rec.get("step"), int):
        out.append(rec)
    return out

  def truncate(self, step: Optional[int]) -> None:
    """Keeps the records of steps <= `step` (none when `step` is None)."""
    if not os.path.exists(self.path):
      return
    keep = [r for r in self.read() if step is not None and r["step"] <= step]
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in keep)
    os.replace(tmp, self.path)
