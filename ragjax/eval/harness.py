"""Run a policy over every dataset of a suite, writing per-question predictions as batches finish.

    plan = plan_suite(c, suite, root, out_dir, limit=0)     # reads the data, no model
    run = run_suite(c, suite, root, out_dir, policy=(cfg, params, tok), retriever=r,
                    plan=plan, judge=None, log=print)

`plan_suite` reads each dataset present on this machine (a missing file is recorded, never
skipped silently): its records (filtered, the first `limit`), the predictions already on disk
(checked to be the same questions; with a smaller `--limit` than before, the ones past it are
left out), the file's provenance (path, bytes, SHA-256) and the settings that decide its
predictions (`dataset_settings`: the resolved protocol, `eval.top_k` included, and the
decoding).  `ragjax.eval.run_record` checks those against `run.json` before any model is
loaded.  `run_suite` then builds one engine per distinct setting (the method config with the
suite's and the dataset's protocol settings on top, `dataset_config`) and runs batches of
min(`eval.batch_size`, the largest dataset's question count) in question order.  Each finished
batch is scored with the column's metrics (`Suite.metrics_of`), judged (`acc`, when the column
reports it and a judge is given) and appended to `<out_dir>/predictions/<dataset>.jsonl` with
the full trajectory record, so a killed run started again skips what is on disk and runs only
the rest.  Sampled decoding keys each question by its id and text (`question_key`), not by its
place in a batch, so a resumed run (or another batch size) samples what an uninterrupted run
would have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Callable, Optional

from ml_collections import ConfigDict

from ragjax.eval.predictions import PredictionStore, check_matches
from ragjax.eval.progress import Progress, fmt_seconds
from ragjax.eval.scoring import score_answer
from ragjax.eval.suites import Suite, read_dataset


@dataclasses.dataclass
class DatasetPlan:
  spec: object                   # DatasetSpec
  path: str                      # the file read
  records: list                  # questions (after filter and limit)
  done: dict                     # index -> prediction already on disk
  file: dict                     # provenance: path, bytes, sha256, hashed
  settings: dict                 # dataset_settings()


@dataclasses.dataclass
class SuitePlan:
  todo: dict                     # key -> DatasetPlan
  missing: dict                  # key -> path wanted

  def datasets_record(self) -> dict:
    """run.json's `datasets` section: each dataset's file and settings."""
    return {k: {"file": p.file, **p.settings} for k, p in self.todo.items()}


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
  batch_size: int = 0           # rows per engine call
  rows_run: int = 0             # rows rolled out, padding included

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


def _plain(x):
  return json.loads(json.dumps(x, default=str))


def dataset_settings(c, suite: Suite, spec) -> dict:
  """What decides a dataset's predictions besides the policy, the index and the questions:
  the protocol its engine runs (the config's, the suite's and the dataset's fields, then
  `eval.top_k`), the decoding, and how the column is read and scored."""
  from ragjax.rollout.factory import protocol_from_config, protocol_section
  dc = dataset_config(c, suite, spec)
  protocol_from_config(dc, evaluation=True)          # an unknown field fails here, before a model
  sampled = not suite.greedy
  return {"format": spec.format, "where": dict(spec.where), "metric": spec.metric,
          "protocol": _plain(protocol_section(dc, evaluation=True)),
          "decoding": {"greedy": suite.greedy,
                       "temperature": suite.temperature if sampled else None,
                       "top_p": float(dc.sampler.top_p) if sampled else None,
                       "top_k": int(dc.sampler.get("top_k", 0)) if sampled else None,
                       "max_new_tokens": int(dc.sampler.max_new_tokens)}}


def question_key(record: dict) -> int:
  """A question's sampling key index: the first 32 bits of SHA-256(id, question)."""
  text = f"{record['id']}\0{record['question']}".encode("utf-8", "surrogatepass")
  return int.from_bytes(hashlib.sha256(text).digest()[:4], "little")


def plan_suite(c, suite: Suite, root: str, out_dir: str, limit: int = 0,
               log: Callable[[str], None] = print) -> SuitePlan:
  """Reads every dataset the suite names (see the module docstring); no model, no index."""
  from ragjax.eval.fingerprint import file_digest
  store = PredictionStore(out_dir)
  plan = SuitePlan({}, {})
  for spec in suite.datasets:
    path = spec.path(root)
    if path is None:
      plan.missing[spec.key] = spec.wanted(root)
      log(f"{spec.key}: MISSING {spec.wanted(root)} (reported in the table, not run)")
      continue
    records = read_dataset(spec, root, limit)
    done = store.load(spec.key)
    limited = bool(limit) and len(records) == limit
    check_matches(spec.key, done, records, store.path(spec.key), limited=limited)
    done = {i: r for i, r in done.items() if i < len(records)}
    plan.todo[spec.key] = DatasetPlan(spec, path, records, done,
                                      {"path": path, **file_digest(path)},
                                      dataset_settings(c, suite, spec))
  return plan


def prediction_record(key: str, index: int, record: dict, row, traj: dict, scores: dict,
                      seconds: float) -> dict:
  return {"dataset": key, "index": index, "id": record["id"], "question": record["question"],
          "golden_answers": list(record["golden_answers"]), "answer": row.answer,
          "scores": scores, "searches": row.num_searches, "queries": row.queries,
          "doc_ids": [list(d) for d in row.doc_ids], "stop_reason": row.stop_reason,
          "extra": row.extra, "response_text": row.response_text, "seconds": seconds,
          "trajectory": traj}


def run_suite(c, suite: Suite, root: str, out_dir: str, *, policy, retriever,
              plan: Optional[SuitePlan] = None, judge=None, limit: int = 0,
              batch_size: Optional[int] = None,
              log: Callable[[str], None] = print) -> SuiteRun:
  """Runs what `plan` (default: `plan_suite(c, suite, root, out_dir, limit)`) left to do."""
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.dump import batch_records
  from ragjax.rollout.factory import make_engine
  cfg, params, tok = policy
  plan = plan or plan_suite(c, suite, root, out_dir, limit, log)
  store = PredictionStore(out_dir)
  os.makedirs(store.dir, exist_ok=True)
  run = SuiteRun(suite, out_dir, {k: p.path for k, p in plan.todo.items()}, dict(plan.missing),
                 {k: len(p.records) for k, p in plan.todo.items()})
  todo = plan.todo
  progress = Progress(sum(len(p.records) - len(p.done) for p in todo.values()), log)
  log(f"suite {suite.name}: {len(todo)} datasets here, {len(run.missing)} missing, "
      f"{progress.total} questions to run ({sum(len(p.done) for p in todo.values())} on disk)")
  # a --limit under the batch size runs batches of that size, not padded to the full one
  largest = max((len(p.records) for p in todo.values()), default=1)
  batch = min(int(batch_size or c.eval.batch_size), largest)
  run.batch_size = batch
  engines = {}
  for key, p in todo.items():
    dc = dataset_config(c, suite, p.spec)
    setting = json.dumps(p.settings["protocol"], sort_keys=True) + json.dumps(
        dc.sampler.to_dict(), sort_keys=True, default=str)
    if setting not in engines:
      engines[setting] = make_engine(dc, cfg, params, tok, retriever, greedy=suite.greedy,
                                     temperature=None if suite.greedy else suite.temperature,
                                     hooks=[], evaluation=True)
    engine = engines[setting]
    metrics = suite.metrics_of(key)
    scored = tuple(m for m in metrics if m != "acc")
    records, count = p.records, len(p.done)
    for s in range(0, len(records), batch):
      idx = [i for i in range(s, min(s + batch, len(records))) if i not in p.done]
      if not idx:
        continue
      chunk = [records[i] for i in idx]
      padded = chunk + [chunk[0]] * (batch - len(chunk))      # one compiled batch shape
      t0 = time.monotonic()
      out = engine.run(padded, samples_per_prompt=1, seed=int(c.seed),
                       key_ids=[question_key(r) for r in padded])
      run.rows_run += len(out.rows)
      rows = out.rows[:len(chunk)]
      scores = [score_answer(row.answer, rec["golden_answers"], scored)
                for rec, row in zip(chunk, rows)]
      if "acc" in metrics and judge is not None:
        verdicts = judge([(rec["question"], row.answer, rec["golden_answers"])
                          for rec, row in zip(chunk, rows)])
        for sc, v in zip(scores, verdicts):
          sc["acc"] = float(v)
      seconds = (time.monotonic() - t0) / len(chunk)
      trajs = batch_records(out, tok, trained=loss_mask(out.traj.labels))
      store.append(key, [prediction_record(key, i, rec, row, traj, sc, seconds)
                         for i, rec, row, traj, sc in zip(idx, chunk, rows, trajs, scores)])
      count += len(chunk)
      progress.update(key, count, len(records), len(chunk))
  run.new_questions, run.seconds = progress.done, progress.elapsed
  log(f"suite {suite.name}: ran {run.new_questions} questions in "
      f"{fmt_seconds(run.seconds)} ({run.questions_per_second:.2f} q/s)")
  return run
