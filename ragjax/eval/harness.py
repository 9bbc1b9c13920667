"""Run a policy over every dataset of a suite, writing per-question predictions as batches finish.

    run = run_suite(c, suite, root, out_dir, policy=(cfg, params, tok), retriever=r,
                    checkpoint=ckpt_dir, judge=None, limit=0, log=print)

For each dataset present on this machine (a missing file is recorded, never skipped
silently): its records, the method config with the suite's and the dataset's protocol
settings on top (`dataset_config`), one greedy (or the suite's sampled) engine per distinct
setting, then fixed-size batches in question order.  Each finished batch is scored, judged
(`acc`, when the suite asks and a judge is given) and appended to
`<out_dir>/predictions/<dataset>.jsonl` with the full trajectory record, so a killed run
started again with the same arguments skips what is on disk and runs only the rest; batches
start at fixed question positions and sampled decoding is seeded by that position, so the
resumed predictions are the ones an uninterrupted run would have written.
`<out_dir>/run.json` holds what decides the predictions (checkpoint, suite settings, judge,
the config's protocol / sampler / rollout / retriever sections); a resume with any of them
changed is refused, naming the fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Optional

from ml_collections import ConfigDict

from ragjax.eval.predictions import PredictionStore, check_matches
from ragjax.eval.progress import Progress, fmt_seconds
from ragjax.eval.scoring import score_answer
from ragjax.eval.suites import Suite, read_dataset

RUN_FILE = "run.json"


@dataclasses.dataclass
class SuiteRun:
  """What a run saw: the files it read, the ones missing, and this process's throughput."""
  suite: Suite
  out_dir: str
  present: dict                 # key -> path read
  missing: dict                 # key -> path wanted
  sizes: dict                   # key -> questions evaluated (after filter and limit)
  new_questions: int = 0        # run in this process (not read back from disk)
  seconds: float = 0.0

  @property
  def questions_per_second(self) -> float:
    return self.new_questions / self.seconds if self.seconds > 0 else 0.0


def dataset_config(c, suite: Suite, spec) -> ConfigDict:
  """The method config with the suite's protocol / sampler settings and the dataset's own
  protocol fields on top (an unknown field is refused when the protocol is built)."""
  d = ConfigDict(c.to_dict())
  d.protocol.update(dict(suite.protocol))
  d.protocol.update(dict(spec.protocol))
  d.sampler.update(dict(suite.sampler))
  if not suite.greedy:
    d.sampler.top_p = suite.top_p
  return d


def run_fingerprint(c, suite: Suite, checkpoint: str, judge_name: str = "") -> dict:
  return {"checkpoint": os.path.abspath(checkpoint), "suite": suite.name, "judge": judge_name,
          "settings": json.loads(json.dumps(suite.settings())),
          "config": {k: json.loads(json.dumps(c[k].to_dict(), default=str))
                     for k in ("protocol", "sampler", "rollout", "retriever")}}


def check_run_file(out_dir: str, fingerprint: dict) -> None:
  """Writes run.json, or checks a resumed run against it field by field."""
  path = os.path.join(out_dir, RUN_FILE)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      old = json.load(f)
    from ragjax.typed_config import flatten
    a, b = flatten(old), flatten(fingerprint)
    diff = [f"{k}: stored={a.get(k)!r} now={b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]
    if diff:
      raise ValueError(f"{out_dir} holds predictions of a different run ({'; '.join(diff[:6])}"
                       f"{' ...' if len(diff) > 6 else ''}); use a new --out directory")
    return
  os.makedirs(out_dir, exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(fingerprint, f, indent=1)


def prediction_record(key: str, index: int, record: dict, row, traj: dict, scores: dict,
                      seconds: float) -> dict:
  return {"dataset": key, "index": index, "id": record["id"], "question": record["question"],
          "golden_answers": list(record["golden_answers"]), "answer": row.answer,
          "scores": scores, "searches": row.num_searches, "queries": row.queries,
          "doc_ids": [list(d) for d in row.doc_ids], "stop_reason": row.stop_reason,
          "extra": row.extra, "response_text": row.response_text, "seconds": seconds,
          "trajectory": traj}


def run_suite(c, suite: Suite, root: str, out_dir: str, *, policy, retriever, checkpoint: str,
              judge=None, limit: int = 0, batch_size: Optional[int] = None,
              log: Callable[[str], None] = print) -> SuiteRun:
  from ragjax.rollout.dump import batch_records
  from ragjax.rollout.factory import make_engine
  cfg, params, tok = policy
  batch_size = int(batch_size or c.eval.batch_size)
  check_run_file(out_dir, run_fingerprint(c, suite, checkpoint, getattr(judge, "name", "")))
  store = PredictionStore(out_dir)
  run = SuiteRun(suite, out_dir, {}, {}, {})
  todo = {}
  for spec in suite.datasets:
    path = spec.path(root)
    if path is None:
      run.missing[spec.key] = spec.wanted(root)
      log(f"{spec.key}: MISSING {spec.wanted(root)} (reported in the table, not run)")
      continue
    records = read_dataset(spec, root, limit)
    done = store.load(spec.key)
    check_matches(spec.key, done, records, store.path(spec.key))
    run.present[spec.key], run.sizes[spec.key] = path, len(records)
    todo[spec.key] = (spec, records, done)
  progress = Progress(sum(len(r) - len(d) for _, r, d in todo.values()), log)
  log(f"suite {suite.name}: {len(todo)} datasets here, {len(run.missing)} missing, "
      f"{progress.total} questions to run ({sum(len(d) for *_, d in todo.values())} on disk)")
  engines = {}
  for key, (spec, records, done) in todo.items():
    dc = dataset_config(c, suite, spec)
    setting = json.dumps([dc.protocol.to_dict(), dc.sampler.to_dict()], sort_keys=True,
                         default=str)
    if setting not in engines:
      engines[setting] = make_engine(dc, cfg, params, tok, retriever, greedy=suite.greedy,
                                     temperature=None if suite.greedy else suite.temperature,
                                     hooks=[], evaluation=True)
    engine = engines[setting]
    metrics = suite.metrics_of(key)
    scored = tuple(m for m in metrics if m != "acc")
    count = len(done)
    for s in range(0, len(records), batch_size):
      idx = [i for i in range(s, min(s + batch_size, len(records))) if i not in done]
      if not idx:
        continue
      chunk = [records[i] for i in idx]
      t0 = time.monotonic()
      batch = engine.run(chunk + [chunk[0]] * (batch_size - len(chunk)), samples_per_prompt=1,
                         seed=int(c.seed) + s)
      rows = batch.rows[:len(chunk)]
      scores = [score_answer(row.answer, rec["golden_answers"], scored)
                for rec, row in zip(chunk, rows)]
      if "acc" in metrics and judge is not None:
        verdicts = judge([(rec["question"], row.answer, rec["golden_answers"])
                          for rec, row in zip(chunk, rows)])
        for sc, v in zip(scores, verdicts):
          sc["acc"] = float(v)
      seconds = (time.monotonic() - t0) / len(chunk)
      trajs = batch_records(batch, tok)
      store.append(key, [prediction_record(key, i, rec, row, traj, sc, seconds)
                         for i, rec, row, traj, sc in zip(idx, chunk, rows, trajs, scores)])
      count += len(chunk)
      progress.update(key, count, len(records), len(chunk))
  run.new_questions, run.seconds = progress.done, progress.elapsed
  log(f"suite {suite.name}: ran {run.new_questions} questions in "
      f"{fmt_seconds(run.seconds)} ({run.questions_per_second:.2f} q/s)")
  return run
