"""Per-question predictions on disk: one JSONL file per dataset, appended as batches finish.

    store = PredictionStore(out_dir)
    done = store.load("nq")              # {index: record} already written (a killed run's)
    store.append("nq", records)          # flushed and fsynced before returning
    preds = read_predictions(out_dir, ["nq", "popqa"])

A record is keyed by `index` (the question's position in the dataset after its filter; ids
need not be unique across files) and carries the question's `id`, so a resumed run can check
it is reading the same questions.  A run killed in the middle of a write leaves a torn last
line; `load` cuts it off (the batch it belonged to is simply run again).
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

PREDICTIONS_DIR = "predictions"


class PredictionError(ValueError):
  """A predictions file that is not ours or does not match the questions; names file and line."""


class PredictionStore:
  def __init__(self, out_dir: str):
    self.dir = os.path.join(out_dir, PREDICTIONS_DIR)      # made by the first append

  def path(self, key: str) -> str:
    return os.path.join(self.dir, f"{key}.jsonl")

  def load(self, key: str) -> dict[int, dict]:
    """Records already written for `key`; a torn final line (a killed write) is removed."""
    path = self.path(key)
    if not os.path.exists(path):
      return {}
    with open(path, "rb") as f:
      data = f.read()
    complete = data.rfind(b"\n") + 1          # bytes after the last newline: a torn write
    if complete < len(data):
      with open(path, "r+b") as f:
        f.truncate(complete)
    out = {}
    for n, raw in enumerate(data[:complete].split(b"\n")[:-1], 1):
      if not raw.strip():
        continue
      try:
        rec = json.loads(raw.decode("utf-8"))
      except (json.JSONDecodeError, UnicodeDecodeError):
        raise PredictionError(f"{path} line {n}: not JSON") from None
      if not isinstance(rec, dict) or "index" not in rec:
        raise PredictionError(f"{path} line {n}: not a prediction record (no 'index')")
      out[int(rec["index"])] = rec
    return out

  def append(self, key: str, records: Iterable[dict]) -> int:
    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
    os.makedirs(self.dir, exist_ok=True)
    with open(self.path(key), "a", encoding="utf-8") as f:
      f.writelines(lines)
      f.flush()
      os.fsync(f.fileno())
    return len(lines)


def check_matches(key: str, done: dict[int, dict], records: Sequence[dict], path: str,
                  limited: bool = False) -> None:
  """Every stored record must be the same question as now (same index, same id); with
  `limited` (the records are the first `--limit` of a longer file) stored ones past the end
  are fine: an earlier run had a larger limit."""
  for i, rec in done.items():
    if i >= len(records) and limited:
      continue
    if i >= len(records) or str(records[i]["id"]) != str(rec.get("id")):
      now = records[i]["id"] if i < len(records) else "<none>"
      raise PredictionError(f"{path}: stored prediction {i} is question {rec.get('id')!r} but "
                            f"the dataset's question {i} is {now!r}; the data changed since "
                            f"this run started (use a new --out directory)")


def read_predictions(out_dir: str, keys: Sequence[str]) -> dict[str, list[dict]]:
  """{key: records sorted by index} for the keys that have a predictions file."""
  if not os.path.isdir(os.path.join(out_dir, PREDICTIONS_DIR)):
    raise PredictionError(f"{out_dir}: no {PREDICTIONS_DIR}/ directory (not an evaluation "
                          "output directory)")
  store = PredictionStore(out_dir)
  out = {}
  for key in keys:
    if os.path.exists(store.path(key)):
      out[key] = [r for _, r in sorted(store.load(key).items())]
  return out
