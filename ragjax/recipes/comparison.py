"""The papers' Table 1 in one command: every method's run, run or reused, and every policy
evaluated on the same questions (`python -m ragjax.compare`).

    entries = load_entries(["configs/smollm2.py", "configs/autorefine.py:smollm2"], overrides=[])
    summary = compare(entries, Options(workdir="runs/compare"))

Under the comparison's directory D:
- `runs/<name>/`: each config's own workdir, trained by `python -m ragjax.train
  --config=FILE:ARG --config.workdir=D/runs/<name>` (a subprocess, its output in `train.log`;
  a killed run resumes there as any training run does).  `compare_run.json`, written
  atomically once the run exits 0, holds the config's fingerprint and the run's wall time (every
  attempt's, `compare_seconds.json`): a later comparison with the same config reuses the run
  without starting it; a failed one is tried again.
- `data/test.jsonl`: the reference config's held-out test questions (its `data.split`), the
  `--heldout` column of the suite in place of the suite's own file.
- `eval/<row>/`: one row's per-question predictions over the suite (`eval.harness.run_suite`,
  appended as batches finish: a killed evaluation resumes at the next batch) and
  `compare_eval.json` (the policy's content digest, every dataset's settings and file digest;
  `done` and the `--limit` once every question is in).  A row whose policy or settings changed
  is set aside as `.stale` and evaluated again; a finished one is read back without loading a
  model; another `--limit` keeps the predictions on disk and runs the rest.
- `rows/<row>.jsonl`: each evaluated row as one row record (`ragjax.eval.row_record`: the
  per-question scores, the run's config fingerprint, the evaluation's key), written once the
  row's evaluation is finished.  `--rows_from DIR` reads such records (another comparison's
  `rows/`, or ones kept in the repository): a row whose run is not here, or whose evaluation
  is not, is read from its record when the record was made by a run of the same config (the
  fingerprint, field by field) on the same question files under the same settings and
  `--limit`; nothing is trained or evaluated for it, and the table says where it came from.
- `table.md`, `table.json`: the table (`ragjax.eval.comparison`).

Rows: direct answer and retrieve-once RAG (the reference config's base model, its `direct` /
`retrieve_once` protocol), cold start (the reference run's `cold_start_policy`), the reference
(the first config, Search-R1 GRPO), then each other config's trained policy under its own
protocol; every row under the suite's pinned protocol and decoding.  A row that was not run
(its config variant does not exist, its run failed, `--skip`, a cold start the reference run
does not have) says why.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from typing import Optional, Sequence

from ragjax.eval.comparison import Row, comparison_table
from ragjax.eval import row_record
from ragjax.recipes.ablation import apply_overrides
from ragjax.recipes.cached_phase import COLD_START_DIR
from ragjax.typed_config import json_safe, write_json_atomic
from ragjax.wiring import components as parts

RUNS_DIR, EVAL_DIR, DATA_DIR = "runs", "eval", "data"
ROWS_DIR = "rows"
RUN_RECORD = "compare_run.json"
RUN_SECONDS = "compare_seconds.json"
EVAL_RECORD = "compare_eval.json"
TRAIN_LOG = "train.log"
DIRECT, RAG, COLD_START = "direct answer", "retrieve-once RAG", "cold start"
REFERENCE = "Search-R1 GRPO"
BASELINE_KEYS = {"direct": DIRECT, "rag": RAG, "cold_start": COLD_START}


@dataclasses.dataclass
class Entry:
  """One `--configs` item: its spec, a short name (its run's and row's directory), the
  loaded config with the overrides (None when the file has no such variant: `missing` says
  why)."""
  spec: str
  name: str
  config: Optional[object]
  missing: str = ""
  given: str = ""                # the spec as typed


@dataclasses.dataclass(frozen=True)
class Options:
  workdir: str
  suite: str = "covered"
  heldout: str = "hotpotqa"          # the suite column the reference's test split replaces
  limit: int = 0                     # the first N questions of each dataset (0: all)
  skip: tuple = ()                   # config specs / names, or direct, rag, cold_start
  data_root: Optional[str] = None
  overrides: tuple = ()              # FIELD=VALUE for every config (and its run)
  rows_from: tuple = ()              # directories (or files) of row records measured elsewhere


def entry_name(spec: str) -> str:
  file, _, arg = spec.partition(":")
  stem = os.path.splitext(os.path.basename(file))[0]
  return f"{stem}_{arg}" if arg else stem


def load_entries(specs: Sequence[str], overrides: Sequence[str] = ()) -> list[Entry]:
  """Every spec's config; a file that is not there or not a config is an error naming it, a
  variant the file refuses (e.g. a `:smollm2` not written yet) a row that is not run."""
  import importlib.util
  if not specs:
    raise ValueError("--configs: give at least one config (the first is the Search-R1 "
                     "reference), e.g. --configs configs/smollm2.py")
  out, names = [], {}
  for spec in specs:
    file, _, arg = spec.partition(":")
    path = os.path.abspath(file)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"--configs {spec}: no config file {path}")
    name = entry_name(spec)
    if name in names:
      raise ValueError(f"--configs: {spec} and {names[name]} have the same name {name!r}")
    names[name] = spec
    try:
      module_spec = importlib.util.spec_from_file_location(f"ragjax_compare_{name}", path)
      module = importlib.util.module_from_spec(module_spec)
      module_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001  (any failure to load is the user's file)
      raise ValueError(f"--configs {spec}: {path} does not load: {type(e).__name__}: "
                       f"{e}") from None
    if not callable(getattr(module, "get_config", None)):
      raise ValueError(f"--configs {spec}: {path} defines no get_config()")
    try:
      c = module.get_config(arg) if arg else module.get_config()
    except (ValueError, KeyError) as e:
      out.append(Entry(spec, name, None, f"config missing: {file} has no variant {arg!r} "
                                         f"({' '.join(str(e).split())[:160]})", spec))
      continue
    out.append(Entry(os.path.relpath(path) + (f":{arg}" if arg else ""), name,
                     apply_overrides(c, overrides), given=spec))
  return out


def skipped(entry_or_key, skip: Sequence[str]) -> bool:
  """A baseline key (direct, rag, cold_start) or a config (its spec as typed or normalised,
  or its name) named by `--skip`."""
  if isinstance(entry_or_key, Entry):
    e = entry_or_key
    return bool({e.spec, e.name, e.given} & set(skip))
  return entry_or_key in skip


def check_skip(entries: Sequence[Entry], skip: Sequence[str]) -> None:
  """Every `--skip` item names a row (a typo would run what it meant to skip)."""
  known = set(BASELINE_KEYS) | {x for e in entries for x in (e.name, e.spec, e.given)}
  unknown = [s for s in skip if s not in known]
  if unknown:
    raise ValueError(f"--skip {','.join(unknown)}: not a row; rows: "
                     f"{', '.join([*BASELINE_KEYS, *(e.name for e in entries)])}")


# --- the runs -------------------------------------------------------------------------------
def run_dir(opts: Options, entry: Entry) -> str:
  return os.path.join(os.path.abspath(opts.workdir), RUNS_DIR, entry.name)


def run_config(entry: Entry, opts: Options):
  c = entry.config.copy_and_resolve_references()
  c.workdir = run_dir(opts, entry)
  return c


def run_fingerprint(c) -> dict:
  from ragjax.rl.run_config import config_fingerprint
  return json_safe(config_fingerprint(c))


def finished_run(c) -> Optional[dict]:
  """The run's record when it finished under this config and its policy reads back."""
  from ragjax.models.hf_io import check_decoder_dir
  stored = parts.read_cache(os.path.join(c.workdir, RUN_RECORD),
                            lambda d: "fingerprint" in d and "seconds" in d)
  if stored is None or stored["fingerprint"] != run_fingerprint(c):
    return None
  try:
    check_decoder_dir(os.path.join(c.workdir, parts.POLICY_DIR))
  except (OSError, ValueError):
    return None
  return stored


def add_seconds(workdir: str, seconds: float) -> float:
  """The wall time every attempt at this run took (`RUN_SECONDS`: failed and resumed attempts
  included; one killed with the comparison is not counted)."""
  path = os.path.join(workdir, RUN_SECONDS)
  stored = parts.read_cache(path, lambda d: isinstance(d.get("seconds"), (int, float)))
  total = (stored["seconds"] if stored else 0.0) + seconds
  write_json_atomic(path, {"seconds": round(total, 1)})
  return total


def run_overrides(opts: Options) -> list[str]:
  """The run's `--config.` flags: `--set`, and `eval.test_rows=False` unless `--set` names it
  (the comparison evaluates every policy itself, so the qa recipe's own test rows would be the
  same questions answered twice; `eval.*` is not in the run's fingerprint)."""
  own = [] if any(o.startswith("eval.test_rows=") for o in opts.overrides) else \
      ["eval.test_rows=False"]
  return [f"--config.{o}" for o in (*own, *opts.overrides)]


def ensure_run(entry: Entry, opts: Options) -> tuple[Optional[dict], str]:
  """(the finished run's record, "") or (None, why it is not there)."""
  c = run_config(entry, opts)
  stored = finished_run(c)
  if stored is not None:
    parts.log(f"{entry.name}: reusing the finished run in {c.workdir}")
    return stored, ""
  os.makedirs(c.workdir, exist_ok=True)
  log_path = os.path.join(c.workdir, TRAIN_LOG)
  cmd = [sys.executable, "-m", "ragjax.train", f"--config={entry.spec}",
         f"--config.workdir={c.workdir}", *run_overrides(opts)]
  parts.log(f"{entry.name}: training ({' '.join(cmd[1:])}; output in {log_path})")
  t0 = time.perf_counter()
  with open(log_path, "a", encoding="utf-8") as log:
    log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
    log.flush()
    code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
  seconds = add_seconds(c.workdir, time.perf_counter() - t0)
  if code != 0:
    with open(log_path, encoding="utf-8", errors="replace") as f:
      lines = [l.strip() for l in f.read().splitlines() if l.strip()]
    last = lines[-1][:200] if lines else ""
    parts.log(f"{entry.name}: the run failed (exit {code}): {last}")
    return None, f"run failed (exit {code}: {last}; {log_path})"
  record = {"config": entry.spec, "overrides": list(opts.overrides),
            "fingerprint": run_fingerprint(c), "seconds": round(seconds, 1),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
  write_json_atomic(os.path.join(c.workdir, RUN_RECORD), record)
  if finished_run(c) is None:          # exit 0 but no policy that reads back
    os.remove(os.path.join(c.workdir, RUN_RECORD))
    return None, f"the run exited 0 but left no policy in {c.workdir}/{parts.POLICY_DIR}"
  return record, ""


# --- the evaluations ------------------------------------------------------------------------
@dataclasses.dataclass
class System:
  """One evaluated row: its config (protocol, retriever), the policy, the run it came from."""
  key: str                       # its eval/ directory
  name: str
  config: object
  checkpoint: str
  workdir: str                   # where its retriever's index lives
  baseline: bool = False         # the one-turn protocols (no search turns)
  run_seconds: Optional[float] = None
  source: str = ""
  fingerprint: Optional[dict] = None        # the config fingerprint of the run it came from
  record: Optional[row_record.RowRecord] = None   # a row record of it measured elsewhere


class NotEvaluated(Exception):
  """A row whose policy is not on this machine and whose record does not fit."""


def baseline_config(c, protocol: str):
  """The reference config with a one-turn baseline protocol (`direct`, `retrieve_once`),
  keeping its retrieval depth, passage length and worked example."""
  d = c.copy_and_resolve_references()
  fields = {k: v for k, v in c.protocol.items() if k in ("top_k", "obs_max_tokens",
                                                         "demonstration", "example_answer")}
  with d.unlocked():
    d.protocol = type(c.protocol)(dict(name=protocol, max_turns=0, **fields))
  return d


def heldout_suite(c, opts: Options, data_file: Optional[str]):
  """The suite of the reference config, its `--heldout` column read from `data_file`."""
  from ragjax.eval.suites import get_suite
  suite = get_suite(c.eval, opts.suite)
  if data_file is None:
    return suite
  if opts.heldout not in suite.keys:
    raise ValueError(f"--heldout {opts.heldout}: suite {suite.name} has no such dataset "
                     f"({', '.join(suite.keys)})")
  specs = tuple(dataclasses.replace(s, file=data_file, format="flashrag", where=(), sample="",
                                    name=f"{s.name} (held out)")
                if s.key == opts.heldout else s for s in suite.datasets)
  return dataclasses.replace(suite, datasets=specs)


def write_heldout(c, opts: Options) -> Optional[str]:
  """The reference config's test questions as `D/data/test.jsonl` (None: its data are not
  question files, and the suite's own file stays)."""
  if not opts.heldout or c.data.source != "files":
    return None
  from ragjax.data.prepare import write_flashrag
  test = parts.question_splits(c)["test"][:c.eval.max_questions or None]
  if not test:
    raise ValueError(f"the reference config {c.workdir} has no test questions for "
                     f"--heldout {opts.heldout}")
  path = os.path.join(os.path.abspath(opts.workdir), DATA_DIR, "test.jsonl")
  tmp = path + ".new"
  write_flashrag(tmp, test)
  if os.path.exists(path) and open(path, "rb").read() == open(tmp, "rb").read():
    os.remove(tmp)            # the same questions: the file (and its evaluations) stay
  else:
    os.replace(tmp, path)
  return path


def policy_digest(path: str) -> dict:
  from ragjax.eval.fingerprint import checkpoint_fingerprint, file_digest
  if os.path.isdir(path):
    return {"path": path, "sha256": checkpoint_fingerprint(path)["sha256"]}
  return {"path": path, "sha256": file_digest(path)["sha256"]}


def system_suite(suite, system: System):
  if not system.baseline:
    return suite
  pinned = tuple((k, v) for k, v in suite.protocol if k != "max_turns") + (("max_turns", 0),)
  return dataclasses.replace(suite, protocol=pinned)


def evaluation_key(system: System, suite, root: str) -> dict:
  """The policy's content digest (None when it is not on this machine), every dataset's file
  digest and settings."""
  from ragjax.eval.fingerprint import file_digest
  from ragjax.eval.harness import dataset_settings
  datasets = {}
  for spec in suite.datasets:
    path = spec.path(root)
    datasets[spec.key] = {"file": None if path is None else {"path": path, **file_digest(path)},
                          **dataset_settings(system.config, suite, spec)}
  policy = policy_digest(system.checkpoint) if os.path.exists(system.checkpoint) else None
  return json_safe({"policy": policy, "datasets": datasets})


def evaluate(system: System, suite, root: str, opts: Options, retrievers: dict
             ) -> tuple[dict, dict]:
  """({dataset key: predictions}, the row record's header) of one row over the suite: read back
  when finished here, else read from its row record when that fits, else run (or resumed)
  here; NotEvaluated when the policy is not here and no record fits."""
  from ragjax.eval.harness import plan_suite
  from ragjax.eval.predictions import read_predictions
  suite = system_suite(suite, system)
  out = os.path.join(os.path.abspath(opts.workdir), EVAL_DIR, system.key)
  record_path = os.path.join(out, EVAL_RECORD)
  key = evaluation_key(system, suite, root)
  here = key["policy"] is not None
  stored = parts.read_cache(record_path, lambda d: "key" in d and "done" in d) if here else None
  if stored is not None and stored["key"] != key:
    parts.set_aside(out, "evaluated with another policy, question file or setting", stale=True)
    stored = None
  finished = stored is not None and stored["done"] and stored.get("limit") == opts.limit
  if not finished and system.record is not None:
    why = row_record.evaluation_mismatch(system.record, key, opts.limit)
    if why is None:
      parts.log(f"{system.name}: reading the row from {system.record.describe()}")
      return system.record.preds, system.record.header
    if not here:
      raise NotEvaluated(why)
    parts.log(f"{system.name}: not reading {system.record.path}: {why}")
  if not here:
    raise NotEvaluated(f"its policy {system.checkpoint} is not on this machine")
  if not finished:
    # unfinished, or another --limit: the predictions on disk are kept, the rest run
    os.makedirs(out, exist_ok=True)
    write_json_atomic(record_path, {"key": key, "done": False})
    plan = plan_suite(system.config, suite, root, out, opts.limit, parts.log)
    if any(len(p.done) < len(p.records) for p in plan.todo.values()):
      run_policy(system, suite, root, out, plan, retrievers)
    stored = {"key": key, "done": True, "limit": opts.limit,
              "sizes": {k: len(p.records) for k, p in plan.todo.items()},
              "missing": plan.missing}
    write_json_atomic(record_path, stored)
  else:
    parts.log(f"{system.name}: reusing the finished evaluation in {out}")
  preds = read_predictions(out, suite.keys) if os.path.isdir(
      os.path.join(out, "predictions")) else {}
  preds = {k: [p for p in v if p["index"] < stored["sizes"].get(k, 0)] for k, v in preds.items()}
  header = {"key": system.key, "name": system.name, "source": system.source,
            "run": {"fingerprint": system.fingerprint, "seconds": system.run_seconds},
            "evaluation": key, "limit": opts.limit, "sizes": stored["sizes"]}
  return preds, header


def run_policy(system: System, suite, root: str, out: str, plan, retrievers: dict) -> None:
  from ragjax.eval.harness import dataset_config, run_suite
  from ragjax.eval.systems import with_documents
  from ragjax.rollout.factory import protocol_from_config
  c = system.config.copy_and_resolve_references()
  c.model.checkpoint = system.checkpoint
  if system.workdir not in retrievers:
    retrievers[system.workdir] = parts.open_retriever(c, system.workdir)
  retriever = retrievers[system.workdir]
  cfg, params, tok = parts.load_policy(c)
  if c.protocol.name == "retrieve_once":
    for p in plan.todo.values():
      protocol = protocol_from_config(dataset_config(c, suite, p.spec), evaluation=True)
      p.records = with_documents(p.records, retriever, protocol, tok)
  parts.log(f"{system.name}: evaluating {system.checkpoint} -> {out}")
  run_suite(c, suite, root, out, policy=(cfg, params, tok), retriever=retriever, plan=plan,
            log=parts.log)


# --- the whole comparison -------------------------------------------------------------------
def fitting_record(records: dict, key: str, fingerprint: dict) -> Optional[row_record.RowRecord]:
  """The row record of `key` when it came from a run with this config fingerprint."""
  rec = records.get(key)
  if rec is None:
    return None
  why = row_record.run_mismatch(rec, fingerprint)
  if why is not None:
    parts.log(f"{key}: not reading {rec.path}: {why}")
    return None
  return rec


def systems_of(entries: Sequence[Entry], runs: dict, opts: Options,
               records: Optional[dict] = None) -> tuple[list, dict]:
  """(the rows to evaluate as `System`s, {row name: why not run} for the others), in the
  table's order.  The baselines and the cold start carry the reference run's fingerprint (their
  protocol, retriever and cold start are its config's)."""
  records = records or {}
  ref = entries[0]
  order, why = [], {}
  base = run_config(ref, opts)
  ref_fp = run_fingerprint(base)
  for key, name, protocol in (("direct", DIRECT, "direct"), ("rag", RAG, "retrieve_once")):
    if skipped(key, opts.skip):
      why[name] = "--skip"
    else:
      order.append(System(key, name, baseline_config(base, protocol), base.model.checkpoint,
                          base.workdir, baseline=True, source=f"{ref.spec}: model.checkpoint",
                          fingerprint=ref_fp, record=fitting_record(records, key, ref_fp)))
  ref_run, ref_why = runs.get(ref.name, (None, "--skip"))
  cold = os.path.join(base.workdir, COLD_START_DIR)
  cold_record = fitting_record(records, "cold_start", ref_fp) if ref_run is not None else None
  if skipped("cold_start", opts.skip):
    why[COLD_START] = "--skip"
  elif ref_run is None:
    why[COLD_START] = f"the reference run is not there ({ref_why})"
  elif not os.path.isdir(cold) and cold_record is None:
    why[COLD_START] = (f"the reference run has no cold start ({cold} absent: sft.steps=0?"
                       + (" or read from a row record, with no cold-start record beside it)"
                          if ref_run.get("record") else ")"))
  else:
    order.append(System("cold_start", COLD_START, base, cold, base.workdir,
                        source=f"{ref.spec}: {COLD_START_DIR}", fingerprint=ref_fp,
                        record=cold_record))
  for i, e in enumerate(entries):
    name = REFERENCE if i == 0 else e.spec
    record, reason = runs.get(e.name, (None, e.missing or "--skip"))
    if record is None:
      why[name] = reason
      continue
    c = run_config(e, opts)
    order.append(System(e.name, name, c, os.path.join(c.workdir, parts.POLICY_DIR), c.workdir,
                        run_seconds=record["seconds"], source=e.spec,
                        fingerprint=record.get("fingerprint"),
                        record=record.get("record") or fitting_record(
                            records, e.name, run_fingerprint(c))))
  return order, why


def run_or_record(entry: Entry, opts: Options, records: dict) -> tuple[Optional[dict], str]:
  """`ensure_run`, unless the run is not finished here and a row record of the same config
  is in `--rows_from`: then the record stands for it and nothing is trained."""
  rec = records.get(entry.name)
  if rec is not None:
    c = run_config(entry, opts)
    if finished_run(c) is None:
      fingerprint = run_fingerprint(c)
      if fitting_record(records, entry.name, fingerprint) is not None:
        parts.log(f"{entry.name}: no finished run here; its row is read from {rec.describe()}")
        return {"seconds": rec.header["run"].get("seconds"), "fingerprint": fingerprint,
                "record": rec}, ""
  return ensure_run(entry, opts)


def row_order(entries: Sequence[Entry]) -> list[str]:
  return [DIRECT, RAG, COLD_START, REFERENCE] + [e.spec for e in entries[1:]]


def compare(entries: Sequence[Entry], opts: Options, start_backend=None) -> dict:
  """Runs (or reuses) every config's run, evaluates (or reads back) every row, writes
  `table.md` and `table.json` under `opts.workdir`; returns the table's {"markdown", "json"}."""
  from ragjax.eval.suites import data_root
  workdir = os.path.abspath(opts.workdir)
  ref = entries[0]
  if ref.config is None:
    raise ValueError(f"the reference config {ref.spec} does not load ({ref.missing}): the "
                     "table's questions and baselines come from it")
  records = row_record.read_rows(opts.rows_from)      # bad records: an error before any work
  os.makedirs(workdir, exist_ok=True)
  runs = {}
  for e in entries:
    if e.config is None:
      runs[e.name] = (None, e.missing)
    elif skipped(e, opts.skip):
      runs[e.name] = (None, "--skip")
    else:
      runs[e.name] = run_or_record(e, opts, records)
  if start_backend is not None:
    start_backend()                    # after the training subprocesses: one JAX at a time
  base = run_config(ref, opts)
  suite = heldout_suite(base, opts, write_heldout(base, opts))
  root = data_root(base.eval, opts.data_root)
  systems, why = systems_of(entries, runs, opts, records)
  retrievers, rows, read = {}, {}, []
  for s in systems:
    try:
      preds, header = evaluate(s, suite, root, opts, retrievers)
    except NotEvaluated as e:
      why[s.name] = f"its row record does not fit: {e}"
      continue
    source = s.source
    if header is (s.record.header if s.record else None):
      source = f"{s.source}; read from {s.record.describe()}"
      read.append(f"{s.name}: {s.record.describe()}")
    row_record.write_row(os.path.join(workdir, ROWS_DIR, f"{s.key}.jsonl"), header, preds)
    rows[s.name] = Row(s.name, preds, run_seconds=s.run_seconds, source=source)
  for name, reason in why.items():
    rows[name] = Row(name, None, reason)
  table = comparison_table([rows[n] for n in row_order(entries)],
                           [(s.key, s.name) for s in suite.datasets], REFERENCE)
  table["json"].update(suite=suite.name, configs=[e.spec for e in entries],
                       overrides=list(opts.overrides), limit=opts.limit, data_root=root)
  head = [f"# Comparison on suite `{suite.name}` ({workdir})", "",
          f"- configs: {', '.join(e.spec for e in entries)} (the first is {REFERENCE})"]
  if opts.overrides:
    head.append(f"- overrides on every config: {'; '.join(opts.overrides)}")
  if opts.limit:
    head.append(f"- the first {opts.limit} questions of each dataset")
  if read:
    head.append("- rows read from row records (measured there, not here): " + "; ".join(read))
  head.append("- questions: " + ", ".join(
      f"{s.name} {s.wanted(root)}" for s in suite.datasets))
  markdown = "\n".join(head + ["", table["markdown"]])
  md_path = os.path.join(workdir, "table.md")
  with open(md_path + ".tmp", "w", encoding="utf-8") as f:
    f.write(markdown + "\n")
  os.replace(md_path + ".tmp", md_path)
  write_json_atomic(os.path.join(workdir, "table.json"), table["json"])
  parts.log(f"table: {md_path}, {os.path.join(workdir, 'table.json')}")
  return {"markdown": markdown, "json": table["json"]}
