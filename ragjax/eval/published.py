"""The published rows an evaluation is read against (`configs/paper_results.json`).

    row = published_row("search_r1_7", "Search-R1-base", "qwen2.5-3b")
    row["values"]["nq"]["em"]      -> 42.1 (percent)
    row["averages"]["Avg"]["em"]   -> 31.2
    row["source"]                  -> the spec section it was transcribed from

A row is chosen by the suite's `paper_table`, the config's `eval.method` and the model
(`eval.model`, else `model.preset`); no match is not an error (a new method has no published
row), the table then says which rows exist.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from ragjax.eval.suites import REPO

PAPER_RESULTS = os.path.join(REPO, "configs", "paper_results.json")


def load_published(path: str = PAPER_RESULTS) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def available_rows(table: str, path: str = PAPER_RESULTS) -> list[str]:
  rows = load_published(path).get(table, {}).get("rows", [])
  return [f"{r['method']} / {r['model']}" for r in rows]


def published_row(table: str, method: str, model: str,
                  path: str = PAPER_RESULTS) -> Optional[dict]:
  if not table or not method:
    return None
  for r in load_published(path).get(table, {}).get("rows", []):
    if r["method"].lower() == method.lower() and r["model"].lower() == (model or "").lower():
      return r
  return None
