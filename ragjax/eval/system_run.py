"""One evaluation system (a policy + retriever + protocol engine) over a list of questions, its
per-question predictions written as batches finish (`python -m ragjax.evaluate --checkpoint D
--data FILE --out DIR`), so a killed run resumes where it stopped; and the pairing of two such
runs.

    preds = run_system("retrieval", engine, records, out_dir, batch_size=8, seed=0,
                       tokenizer=tok)
    result = system_result("policy + retrieval", "test", preds, "em")
    rows, md = compare_systems(SYSTEMS, read_predictions(a, keys), read_predictions(b, keys))

A prediction is the suite harness's record (`harness.prediction_record`: the question's index
and id, the parsed answer, its scores, searches, the full trajectory) plus the question type;
its scores are EM, F1 and cover-EM (`scoring.score_answer`) and, for another `--metric`, that
metric under its own name.  Without an output directory nothing is written and every question
is run.  Greedy decoding does not depend on a question's place in a batch, so the questions a
resumed run adds give what an uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional, Sequence

from ragjax.eval.harness import prediction_record
from ragjax.eval.predictions import PredictionStore, check_matches
from ragjax.eval.scoring import score_answer
from ragjax.eval.systems import SystemResult, qtype_of

SCORED = ("em", "f1", "cover_em")


@dataclasses.dataclass(frozen=True)
class System:
  key: str                     # the predictions file's name
  name: str                    # the table's row


# The two greedy rows of `python -m ragjax.evaluate --checkpoint`.
SYSTEMS = (System("retrieval", "policy + retrieval"),
           System("no_retrieval", "policy, no retrieval"))


def with_ids(records: Sequence[dict]) -> list[dict]:
  """The records, each with an `id` (its position, `q<i>`, where the file gave none): a
  resumed run checks its stored predictions are the same questions by id."""
  return [r if r.get("id") not in (None, "") else dict(r, id=f"q{i}")
          for i, r in enumerate(records)]


def run_system(key: str, engine, records: Sequence[dict], out_dir: Optional[str], *,
               batch_size: int, seed: int, tokenizer, metric: str = "em",
               score: Optional[Callable] = None, limited: bool = False,
               log: Callable[[str], None] = print) -> list[dict]:
  """Every record's prediction, in order: those already in `<out_dir>/predictions/<key>.jsonl`
  read back, the rest run in batches of `batch_size` (the last padded with copies, one
  compiled shape) and appended as each batch finishes.  `score(answer, record)` scores
  `metric` when it is not one of SCORED.  `limited`: the records are the first `--limit` of
  a longer file (stored predictions past them are kept, not refused)."""
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.dump import batch_records
  store = PredictionStore(out_dir) if out_dir else None
  done = store.load(key) if store else {}
  if store:
    check_matches(key, done, records, store.path(key), limited=limited)
  done = {i: r for i, r in done.items() if i < len(records)}
  if done:
    log(f"{key}: {len(done)} of {len(records)} questions on disk")
  out = dict(done)
  todo = [i for i in range(len(records)) if i not in done]
  for s in range(0, len(todo), batch_size):
    idx = todo[s:s + batch_size]
    chunk = [records[i] for i in idx]
    padded = chunk + [chunk[0]] * (batch_size - len(chunk))
    t0 = time.monotonic()
    batch = engine.run(padded, samples_per_prompt=1, seed=seed)
    rows = batch.rows[:len(chunk)]
    seconds = (time.monotonic() - t0) / len(chunk)
    trajs = batch_records(batch, tokenizer, trained=loss_mask(batch.traj.labels))
    new = []
    for i, rec, row, traj in zip(idx, chunk, rows, trajs):
      scores = score_answer(row.answer, rec["golden_answers"], SCORED)
      if metric not in SCORED:
        scores[metric] = float(score(row.answer, rec))
      pred = prediction_record(key, i, rec, row, traj, scores, seconds)
      pred["qtype"] = qtype_of(rec)
      new.append(pred)
      out[i] = pred
    if store:
      store.append(key, new)
  return [out[i] for i in range(len(records))]


def system_result(name: str, split: str, preds: Sequence[dict], metric: str = "em"
                  ) -> SystemResult:
  """The table's view of one system's predictions: `metric` per question, and F1 beside EM
  (not beside another metric: UR²'s per-task score mixes letter EM and math equivalence)."""
  return SystemResult(name, split, em=[p["scores"][metric] for p in preds],
                      qtypes=[p.get("qtype", "other") for p in preds],
                      searches=[p["searches"] for p in preds], batch=[],
                      responses=[p["response_text"] for p in preds],
                      f1=[p["scores"]["f1"] for p in preds] if metric == "em" else [])


def compare_systems(systems: Sequence[System], preds_a: dict, preds_b: dict,
                    metrics: Sequence[str] = ("em", "f1"), name_a: str = "A",
                    name_b: str = "B") -> tuple[list[dict], str]:
  """Two runs of the same questions paired per system and metric: the difference in points
  with its 95% paired-bootstrap interval and McNemar's test on EM (`eval.paired`, as
  `--suite --compare`); no average over systems (they are not datasets)."""
  from ragjax.eval.paired import (PairedColumn, PairedColumns, compare_runs,
                                   render_comparison)
  rows = []
  for system in systems:
    for metric in metrics:
      column = PairedColumn(system.key, f"{system.name}, {metric.upper()}", metric)
      got, _ = compare_runs(PairedColumns((column,)), preds_a, preds_b)
      rows.append(dict(got[0], system=system.key))
  return rows, render_comparison(rows, name_a, name_b)
