"""`python -m ragjax.evaluate --suite NAME`: a checkpoint over a benchmark suite, to the paper's
table; and `--compare`: two runs' predictions, paired.

Wires the parts: the suite from the config (`ragjax.eval.suites`, with `--add_dataset`s,
`--datasets` choosing what runs, and command-line overrides of what it pins refused), the data
(`ragjax.eval.harness.plan_suite`), `run.json` (`ragjax.eval.run_record`: the checkpoint's and
the index's content fingerprints, the settings, each file's hash; checked before the model or
the index is loaded), the retriever (`--index` / `--url` or the config's), the policy
checkpoint, the judge model for `acc` (`eval.judge`), the run (`ragjax.eval.harness`,
resumable), the table (`ragjax.eval.paper_table`) beside the published row
(`ragjax.eval.published`), and the paired comparison (`ragjax.eval.paired`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Optional

from ragjax.wiring.chat_services import eval_chat
from ragjax.wiring.components import log, open_retriever


@dataclasses.dataclass(frozen=True)
class SuiteOptions:
  suite: str
  checkpoint: Optional[str] = None     # None: only tabulate / compare what is on disk
  out: Optional[str] = None            # default <workdir>/eval/<suite>
  data_root: Optional[str] = None
  index: Optional[str] = None
  url: Optional[str] = None
  limit: int = 0
  compare: Optional[str] = None        # another run's output directory
  datasets: tuple = ()                 # run only these (`--datasets`); () = all
  add_datasets: tuple = ()             # `--add_dataset` texts (suites.ADD_DATASET_HELP)
  overrides: tuple = ()                # dotted config paths set on the command line


def out_dir(c, opts: SuiteOptions) -> str:
  return os.path.abspath(opts.out or os.path.join(c.workdir, "eval", opts.suite))


def make_judge(c, suite):
  """The `acc` judge (`chat_services.eval_chat`: `eval.judge`); None when the suite has no
  judge template or no judge is configured."""
  judged = eval_chat(c) if suite.judge_template else None
  if judged is None:
    return None
  from ragjax.eval.judging import AnswerJudge
  chat, name = judged
  return AnswerJudge(chat, suite.judge_template, name=name)


def _published(c, suite):
  from ragjax.eval.published import available_rows, published_row
  model = c.eval.model or c.model.preset
  row = published_row(suite.paper_table, c.eval.method, model)
  hint = None
  if row is None and suite.paper_table:
    hint = (f"No published row for method {c.eval.method!r} / model {model!r} in "
            f"configs/paper_results.json [{suite.paper_table}] (set eval.method / eval.model); "
            f"rows there: {', '.join(available_rows(suite.paper_table))}.")
  return row, hint


def tabulate(c, suite, directory: str, *, sizes=None, missing=None, info=None, files=None,
             not_run=()) -> dict:
  """The table of the predictions in `directory` (sizes / missing default to what is there
  and to files absent under the data root; predictions past a dataset's size, left by an
  earlier run with a larger --limit, are not counted).  `not_run`: datasets left out by
  `--datasets` (shown as not run unless an earlier run left predictions)."""
  from ragjax.eval.paper_table import summarize, write_tables
  from ragjax.eval.predictions import read_predictions
  preds = read_predictions(directory, suite.keys)
  sizes = dict(sizes or {})
  preds = {k: [r for r in v if k not in sizes or r["index"] < sizes[k]] for k, v in preds.items()}
  not_run = [k for k in not_run if k not in preds]
  if missing is None:
    missing = {k: "(no predictions)" for k in suite.keys if k not in preds}
  missing = {k: v for k, v in missing.items() if k not in not_run}
  for k, v in preds.items():
    sizes.setdefault(k, len(v))
  row, hint = _published(c, suite)
  info = dict(info or {})
  if hint:
    info["published_hint"] = hint
  summary = summarize(suite, preds, sizes, missing, published=row, info=info, files=files,
                      not_run=not_run)
  summary["paths"] = write_tables(directory, summary)
  return summary


def build_suite(c, opts: SuiteOptions):
  """(the suite with the `--add_dataset`s, the part of it to run: `--datasets` and the added
  ones); refuses a command-line override of a setting the suite pins."""
  from ragjax.eval.suites import (add_datasets, check_overrides, data_root, get_suite,
                                  select_datasets)
  own = get_suite(c.eval, opts.suite)
  suite = add_datasets(own, opts.add_datasets)
  check_overrides(suite, opts.overrides)
  added = [k for k in suite.keys if k not in own.keys]
  root = data_root(c.eval, opts.data_root)
  named = {f"eval.suites.{opts.suite}.datasets.{k}.{f}": k for k in suite.keys
           for f in ("file", "format")}
  overridden = {named[o] for o in opts.overrides if o in named}
  for spec in suite.datasets:       # a file named on the command line must be there
    if spec.path(root) is not None:
      continue
    if spec.key in added:
      raise FileNotFoundError(f"--add_dataset {spec.key}: {spec.wanted(root)} not found")
    if spec.key in overridden:
      raise FileNotFoundError(f"--config.eval.suites.{opts.suite}.datasets.{spec.key}.file: "
                              f"{spec.wanted(root)} not found")
    if spec.key in opts.datasets:
      raise FileNotFoundError(f"--datasets {spec.key}: its file {spec.wanted(root)} is not "
                              f"under the data root {root}")
  if not opts.datasets:
    return suite, suite
  return suite, select_datasets(suite, list(opts.datasets) + added)


def evaluate_suite(c, opts: SuiteOptions) -> str:
  """Runs (or resumes) the suite, writes table.{md,csv,json}; returns the markdown (and the
  comparison with `opts.compare` when given)."""
  suite, subset = build_suite(c, opts)
  directory = out_dir(c, opts)
  text = ""
  if opts.checkpoint:
    text = _run(c, suite, subset, opts, directory)
  elif not opts.compare:
    raise ValueError("--suite needs --checkpoint (to run) or --compare (to compare runs)")
  elif os.path.exists(os.path.join(directory, "table.md")):
    with open(os.path.join(directory, "table.md"), encoding="utf-8") as f:
      text = f.read().rstrip("\n")
  if opts.compare:
    text += "\n\n" + compare(c, suite, directory, os.path.abspath(opts.compare))
  return text


def _run(c, suite, subset, opts: SuiteOptions, directory: str) -> str:
  """Everything that can be checked without the model first: the data, the checkpoint's and
  the index's fingerprints, run.json; then the index, the judge and the model."""
  from ragjax.eval import run_record as rr
  from ragjax.eval.fingerprint import checkpoint_fingerprint
  from ragjax.eval.harness import plan_suite, run_suite
  from ragjax.eval.suites import data_root
  from ragjax.models.model_config import read_hf_config
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  root = data_root(c.eval, opts.data_root)
  c = c.copy_and_resolve_references()
  if opts.index or opts.url:
    c.retriever.index, c.retriever.url = opts.index or "", opts.url or ""
  if not (c.retriever.index or c.retriever.url):
    raise ValueError("--suite needs a retriever: --index DIR (python -m ragjax.retrieval.build) "
                     "or --url of a Search-R1 /retrieve server")
  read_hf_config(opts.checkpoint)    # a directory that is not a checkpoint fails here
  plan = plan_suite(c, subset, root, directory, opts.limit, log)
  if not plan.todo:                  # nothing to run: an error, not a table of MISSING
    raise FileNotFoundError(
        f"suite {suite.name}: none of its datasets is under the data root {root} ("
        + ", ".join(f"{k}: {p}" for k, p in plan.missing.items())
        + "); give --data_root or set eval.data_root")
  retriever = None
  if c.retriever.url:                # a server: cheap to open, known by its /health
    retriever = open_retriever(c, os.path.abspath(c.workdir))
  retrieval = rr.retrieval_record(c, retriever)
  checkpoint = {"path": os.path.abspath(opts.checkpoint),
                **checkpoint_fingerprint(opts.checkpoint)}
  stored = rr.check_run_file(directory, rr.run_record(
      c, subset, checkpoint=checkpoint, retrieval=retrieval, judge=rr.judge_record(c, suite),
      datasets=plan.datasets_record()))
  if retriever is None:
    retriever = open_retriever(c, os.path.abspath(c.workdir))
  judge = make_judge(c, suite)
  cfg, params = load_decoder(opts.checkpoint)
  tok = load_tokenizer(opts.checkpoint)
  log(f"suite {suite.name}: {opts.checkpoint} -> {directory} (data root {root})")
  run = run_suite(c, subset, root, directory, policy=(cfg, params, tok), retriever=retriever,
                  plan=plan, judge=judge, log=log)
  ran = {k: stored["datasets"][k] for k in plan.todo}
  info = {"checkpoint": f"{checkpoint['path']} (content {rr.short_digest(checkpoint)})",
          "data_root": root, "retrieval": rr.describe_retrieval(retrieval),
          **rr.settings_lines(ran),
          "throughput": f"{run.questions_per_second:.2f} questions/s over "
                        f"{run.new_questions} questions run by this process",
          "questions_per_second": run.questions_per_second, "new_questions": run.new_questions}
  if judge is not None:
    info.update(judge=judge.name, judge_calls=judge.calls, judge_unparsed=judge.unparsed)
  summary = tabulate(c, suite, directory, sizes=run.sizes, missing=run.missing, info=info,
                     files={k: d["file"] for k, d in stored["datasets"].items()},
                     not_run=[k for k in suite.keys if k not in subset.keys])
  log(f"tables: {', '.join(summary['paths'].values())}")
  return summary["markdown"]


# --- command-line help ---------------------------------------------------------------------
_DATASET_OVERRIDE = re.compile(r"^--config\.eval\.suites\.([^.=]+)\.datasets\.([^.=]+)[.=]")


def _load_config(arg: str):
  """The ConfigDict of `--config`'s FILE[:ARG], loaded as ml-collections does."""
  import importlib.util
  path, _, cfg_arg = arg.partition(":")
  spec = importlib.util.spec_from_file_location("ragjax_evaluate_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(cfg_arg) if cfg_arg else module.get_config()


def dataset_override_error(argv, default_config: str) -> Optional[str]:
  """One line for `--config.eval.suites.S.datasets.K.FIELD=V` naming a dataset (or suite) the
  config lacks: the suite's datasets, and --add_dataset for a new one (ml-collections' own
  message is a quoted KeyError); None when that is not the problem."""
  from absl import flags
  from ragjax.eval.suites import ADD_DATASET_HELP, did_you_mean
  try:
    args = flags.FLAGS.read_flags_from_files(list(argv[1:]), force_gnu=False)
    hits = [(m.groups(), a.split("=", 1)[0]) for a in args if (m := _DATASET_OVERRIDE.match(a))]
    if not hits:
      return None
    cfg = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), default_config)
    suites = _load_config(cfg).eval.suites
  except Exception:  # noqa: BLE001  (the generic one-line error is printed instead)
    return None
  for (name, key), flag in hits:
    if name not in suites:
      return f"{flag}: the config has no suite {name}; its suites: {', '.join(suites)}"
    keys = list(suites[name].get("columns") or suites[name].datasets)
    if key not in keys:
      return (f"{flag}: suite {name} has no dataset {key}{did_you_mean(key, keys)}; its datasets: "
              f"{', '.join(keys)}; to add one: --add_dataset {ADD_DATASET_HELP}")
  return None


def compare(c, suite, dir_a: str, dir_b: str) -> str:
  """Paired comparison of two output directories; writes compare.{md,json} into `dir_a`."""
  from ragjax.eval.paired import compare_runs
  from ragjax.eval.predictions import read_predictions
  rows, md = compare_runs(suite, read_predictions(dir_a, suite.keys),
                          read_predictions(dir_b, suite.keys), name_a=dir_a, name_b=dir_b)
  with open(os.path.join(dir_a, "compare.md"), "w", encoding="utf-8") as f:
    f.write(md + "\n")
  with open(os.path.join(dir_a, "compare.json"), "w", encoding="utf-8") as f:
    json.dump({"a": dir_a, "b": dir_b, "rows": rows}, f, indent=1)
  return md
