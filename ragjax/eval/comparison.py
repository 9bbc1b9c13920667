"""The papers' Table 1 from per-question predictions: systems as rows, datasets as columns.

    summary = comparison_table(rows, columns, reference="Search-R1 GRPO")
    print(summary["markdown"])          # and summary["json"]: every number, per dataset too

`rows`: one `Row` per system, in the table's order (direct answer, retrieve-once RAG, cold start,
Search-R1, each method), with its predictions per dataset (`harness.prediction_record`s, as
`python -m ragjax.evaluate --suite` writes them) or a reason it was not run.  `columns`:
(dataset key, title) pairs.  Per cell: EM and F1 in percent with a 95% bootstrap interval over
the questions; per row: the macro average over the datasets (each dataset resampled on its own,
`paired.stratified_macro_diff`), the paired difference to the reference row on the same
questions (macro over the datasets, EM and F1, with its 95% paired interval and McNemar's p on
EM pooled; per dataset in the JSON), searches per question (every question counted once) and
wall time (the run's training, and the evaluation's rollouts).  A row that was not run reads
"not run" in every cell, its reason under the table: never a blank, never a number from
elsewhere.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from ragjax.eval.paired import (PairedColumn, PairedColumns, compare_runs,
                                 stratified_macro_diff)
from ragjax.report.bootstrap import bootstrap_mean

METRICS = ("em", "f1")
NOT_RUN = "not run"


@dataclasses.dataclass
class Row:
  name: str
  preds: Optional[dict] = None          # dataset key -> prediction records; None: not run
  reason: str = ""                      # why it was not run
  run_seconds: Optional[float] = None   # the training run's wall time (None: no run of its own)
  source: str = ""                      # what was evaluated: a config, a policy directory


def _pct(est) -> dict:
  return {"mean": 100 * est.mean, "low": 100 * est.low, "high": 100 * est.high, "n": est.n}


def _scores(preds: dict, key: str, metric: str) -> list:
  return [p["scores"][metric] for p in preds.get(key, [])]


def row_numbers(row: Row, columns: Sequence[tuple]) -> dict:
  """One evaluated row's cells (None: no predictions for that dataset, its file missing),
  macro averages, searches and evaluation seconds."""
  cells, present = {}, []
  for key, _ in columns:
    if not row.preds.get(key):
      cells[key] = None
      continue
    present.append(key)
    cells[key] = {m: _pct(bootstrap_mean(_scores(row.preds, key, m))) for m in METRICS}
    cells[key]["searches"] = float(np.mean([p["searches"] for p in row.preds[key]]))
  average = {m: _pct(stratified_macro_diff(
      [(x, [0.0] * len(x)) for x in (_scores(row.preds, k, m) for k in present)]))
      for m in METRICS} if present else None
  every = [p for k in present for p in row.preds[k]]
  return {"cells": cells, "average": average, "over": present,
          "searches": float(np.mean([p["searches"] for p in every])) if every else None,
          "eval_seconds": float(sum(p.get("seconds", 0.0) for p in every))}


def paired_to(row: Row, ref: Row, columns: Sequence[tuple]) -> dict:
  """`row` − `ref` per metric, per dataset and macro (points), on the questions both have."""
  out = {}
  for m in METRICS:
    cols = PairedColumns(tuple(PairedColumn(k, title, m) for k, title in columns))
    got, _ = compare_runs(cols, row.preds, ref.preds)
    out[m] = {r["key"]: r for r in got}
  return out


def comparison_table(rows: Sequence[Row], columns: Sequence[tuple], reference: str) -> dict:
  """{"markdown", "json"} of the table (module docstring)."""
  by_name = {r.name: r for r in rows}
  if len(by_name) != len(rows):
    raise ValueError(f"two rows share a name: {[r.name for r in rows]}")
  ref = by_name.get(reference)
  ref_ok = ref is not None and ref.preds is not None
  out = []
  for row in rows:
    if row.preds is None:
      out.append({"system": row.name, "status": NOT_RUN, "reason": row.reason,
                  "source": row.source, "run_seconds": row.run_seconds})
      continue
    entry = {"system": row.name, "status": "ok", "source": row.source,
             "run_seconds": row.run_seconds, **row_numbers(row, columns)}
    if ref_ok and row is not ref:
      entry["paired"] = paired_to(row, ref, columns)
    out.append(entry)
  data = {"columns": [{"key": k, "name": t} for k, t in columns], "reference": reference,
          "reference_run": ref_ok, "rows": out}
  return {"json": data, "markdown": render(data)}


def _ci(x: Optional[dict]) -> str:
  return f"{x['mean']:.1f} [{x['low']:.1f}, {x['high']:.1f}]"


def _diff(p: dict) -> str:
  if p["status"] != "ok" or p["diff"] is None:
    return p["status"]
  lo, hi = p["ci95"]
  return f"{p['diff']:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def render(data: dict) -> str:
  cols = data["columns"]
  ref = data["reference"]
  head = ["system"] + [f"{c['name']} {m.upper()}" for c in cols for m in METRICS] + \
      [f"Avg {m.upper()}" for m in METRICS] + [f"{m.upper()} − {ref} (avg)" for m in METRICS] + \
      ["searches / question", "run (s)", "eval (s)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  notes = []
  for r in data["rows"]:
    if r["status"] == NOT_RUN:
      lines.append("| " + " | ".join([r["system"]] + [NOT_RUN] * (len(head) - 1)) + " |")
      notes.append(f"{r['system']}: not run — {r['reason']}")
      continue
    cells = []
    for c in cols:
      cell = r["cells"][c["key"]]
      cells += [_ci(cell[m]) if cell else "missing" for m in METRICS]
    avg = r["average"]
    cells += [_ci(avg[m]) if avg else "missing" for m in METRICS]
    if r["system"] == ref:
      cells += ["reference"] * len(METRICS)
    elif "paired" in r:
      cells += [_diff(r["paired"][m]["_average"]) for m in METRICS]
    else:
      cells += [f"no {ref} row"] * len(METRICS)
    run = "none of its own" if r["run_seconds"] is None else f"{r['run_seconds']:.0f}"
    searches = "missing" if r["searches"] is None else f"{r['searches']:.2f}"
    cells += [searches, run, f"{r['eval_seconds']:.0f}"]
    lines.append("| " + " | ".join([r["system"]] + cells) + " |")
    if avg and len(r["over"]) < len(cols):
      notes.append(f"{r['system']}: the average is over {', '.join(r['over'])} only")
  out = ["\n".join(lines), "",
         "Percent, 95% bootstrap intervals over questions; Avg: the macro mean over the "
         "datasets (each resampled on its own); the difference to "
         f"{ref} is paired on the same questions (macro over the datasets, per dataset in "
         "table.json); searches: the policy's own (retrieve-once RAG's one retrieval before it "
         "answers is not counted); run: the training run's wall time; eval: the rollouts' wall "
         "time over these questions; missing: the dataset's file is not on this machine."]
  out += [f"- {n}" for n in notes]
  return "\n".join(out)
