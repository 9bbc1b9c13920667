"""`python -m ragjax.evaluate --checkpoint DIR [--config=FILE[:ARG]] [--config.FIELD=V ...]`
`python -m ragjax.evaluate --config=... --checkpoint DIR --suite NAME [--index D | --url U]`

Evaluates a policy checkpoint (an HF directory with its tokenizer, as `python -m ragjax.train`
writes to `<workdir>/policy`) under any recipe's config (the same `--config` and overrides as
training: protocol, sampler, data, retriever), with greedy decoding, and prints EM (with
bootstrap intervals by question type) and F1, with retrieval and with retrieval disabled.
`--out DIR` writes each question's prediction to `DIR/predictions/{retrieval,no_retrieval}.jsonl`
as batches finish (a killed run resumes; `DIR/run.json` refuses a resume with another
checkpoint, question file or setting) and the table to `DIR/table.md`; `--compare DIR2` pairs
this run with another `--out` on the same questions (paired bootstrap interval of the EM and
F1 differences, McNemar on EM; `--out A --compare B` without `--checkpoint` pairs two finished
runs).
`--samples K --temperature T` adds sampled pass@1 and pass@K rows (how much an RL update could
still sharpen).

* The config's data: the synthetic world is regenerated from its seed under
  `--config.workdir` (index reused or built there); question files come from `data.*_files`.
* `--data FILE` (FlashRAG jsonl, verl parquet, HotpotQA / 2Wiki / MuSiQue raw json) with
  `--index DIR` (from `python -m ragjax.retrieval.build`) or `--url` of a Search-R1 server.
* `--suite NAME`: a benchmark suite of the config (`eval.suites`, configs/suites.py) to the
  paper's table (markdown / CSV / JSON under `--out`, default `<workdir>/eval/<NAME>`) beside
  the published row; per-question predictions are written as they finish and a killed run
  resumes (`run.json` holds the checkpoint's and index's fingerprints and every setting; a
  resume that differs is refused before the model loads).  `--datasets a,b` runs some of the
  suite's datasets; `--add_dataset KEY=FILE[,format=F][,metric=M]...` adds one (docs/
  evaluation.md).  A `--config.protocol.*` / `--config.sampler.*` override of a setting the
  suite pins is refused (set `--config.eval.suites.NAME.*` instead); `--config.eval.top_k`
  wins and is recorded.  `--compare DIR2` adds a paired bootstrap / McNemar comparison with
  another run (without `--checkpoint`: compares the predictions already in `--out` and DIR2).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from ragjax.data.readers import READERS
from ragjax.errors import define_config_flag, flags_parser
from ragjax.recipes import DEFAULT_CONFIG

define_config_flag(DEFAULT_CONFIG)
flags.DEFINE_string("checkpoint", None, "HF policy directory (with tokenizer)")
flags.DEFINE_string("split", "test", "split of the config's data: train | dev | test")
flags.DEFINE_enum("metric", "em", ["em", "f1", "cover_em", "letter_em", "math_equiv", "task"],
                  "answer metric; task: each record's task's (UR²: MCQ letter EM, math "
                  "equivalence, QA F1)")
flags.DEFINE_string("data", None, "a question file instead of the config's split")
flags.DEFINE_enum("format", None, sorted(READERS),
                  "format of --data (default: from its extension)")
flags.DEFINE_string("index", None, "retrieval index directory (overrides the config's)")
flags.DEFINE_string("url", None, "Search-R1 retrieval server URL (overrides the config's)")
flags.DEFINE_integer("limit", 0, "evaluate the first N questions only (0 = all)", lower_bound=0)
flags.DEFINE_integer("samples", 0, "also sample this many rollouts per question: pass@1 and "
                     "pass@k rows", lower_bound=0)
flags.DEFINE_float("temperature", 1.0, "temperature for --samples")
flags.DEFINE_string("suite", None, "benchmark suite of the config (eval.suites): the paper's "
                    "table for this checkpoint")
flags.DEFINE_string("out", None, "output directory: per-question predictions (resumable) and "
                    "tables; with --suite default <workdir>/eval/<suite>, without it nothing "
                    "is written unless given")
flags.DEFINE_string("data_root", None, "where suite files live (default eval.data_root, "
                    "else ../shared/data beside the repo)")
flags.DEFINE_string("compare", None, "another run's --out directory: paired bootstrap and "
                    "McNemar per dataset and for the average (--suite), or per system on EM "
                    "and F1 (--checkpoint)")
flags.DEFINE_list("datasets", [], "with --suite: run only these of the suite's datasets "
                  "(comma-separated keys)")
flags.DEFINE_multi_string("add_dataset", [], "with --suite: add a dataset, "
                          "KEY=FILE[,format=F][,metric=M][,name=TITLE][,paper_n=N]"
                          "[,where.FIELD=V][,protocol.FIELD=V] (repeatable)")


def main(argv):
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
  f = flags.FLAGS
  from ragjax.errors import exit_on_user_error
  from ragjax.parallel.backend import start
  from ragjax.parallel.cpu_threads import pin_config
  # argument mistakes first (one line, nothing started), then the backend
  if f.suite:
    if f.samples or f.data or f.split != "test":
      raise app.UsageError("--suite takes its questions from the suite; drop --data / --split / "
                           "--samples", exitcode=2)
    with exit_on_user_error("ragjax.evaluate"):
      if not f["config"].present:
        raise ValueError("--suite needs --config=configs/<method>.py:<size> (the method's "
                         "protocol and prompt; the default config is the synthetic world's)")
  else:
    if f.data_root or f.datasets or f.add_dataset:
      raise app.UsageError("--data_root / --datasets / --add_dataset go with --suite",
                           exitcode=2)
    with exit_on_user_error("ragjax.evaluate"):
      if f.compare and not f.out:
        raise ValueError("--compare needs --out (this run's predictions directory)")
      if not f.checkpoint and not f.compare:
        raise ValueError("--checkpoint is required (or --out A --compare B to pair two "
                         "finished runs)")
    if f.samples and f.temperature <= 0:
      raise app.UsageError("--samples needs --temperature > 0", exitcode=2)
    if f.data and not (f.index or f.url or f.config.retriever.index or f.config.retriever.url):
      raise app.UsageError("--data needs --index or --url (or retriever.index / retriever.url "
                           "in the config)", exitcode=2)
  with exit_on_user_error("ragjax.evaluate"):
    check_inputs(f)
    pin_config(f.config)     # before JAX's CPU backend starts
    start("ragjax.evaluate", f.config)     # backend line; no CPU fallback of a GPU / TPU run
  if f.suite:
    from ragjax.recipes.eval_suite import SuiteOptions, evaluate_suite
    with exit_on_user_error("ragjax.evaluate"):
      print(evaluate_suite(f.config, SuiteOptions(
          suite=f.suite, checkpoint=f.checkpoint, out=f.out, data_root=f.data_root,
          index=f.index, url=f.url, limit=f.limit, compare=f.compare,
          datasets=tuple(f.datasets), add_datasets=tuple(f.add_dataset),
          overrides=tuple(config_flags.get_override_values(f["config"])))))
    return
  from ragjax.wiring.components import (EvalOptions, compare_checkpoint_runs,
                                        evaluate_checkpoint)
  if not f.checkpoint:                # --out A --compare B: the two runs' predictions, paired
    with exit_on_user_error("ragjax.evaluate"):
      print(compare_checkpoint_runs(f.out, f.compare))
    return
  qtypes = groups = None
  if f.config.data.source == "world" and not f.data:
    from ragjax.data.world import ENTITY_QTYPES, QTYPES
    qtypes, groups = QTYPES, {"entity": ENTITY_QTYPES}
  with exit_on_user_error("ragjax.evaluate"):
    from ragjax.models.hf_io import check_decoder_dir
    check_decoder_dir(f.checkpoint)  # a wrong directory fails now, not after the index is built
    print(evaluate_checkpoint(f.config, EvalOptions(
        checkpoint=f.checkpoint, split=f.split, data=f.data, data_format=f.format,
        index=f.index, url=f.url, limit=f.limit, samples=f.samples,
        temperature=f.temperature, metric=f.metric, out=f.out, compare=f.compare),
        qtypes, groups))


SPLITS = ("train", "dev", "test")


def check_inputs(f) -> None:
  """The config's seed, `eval` sizes and retriever, the split, and the workdir when this run
  writes there (the world and its index, a suite's default output): before the backend, the
  world or the model."""
  from ragjax.wiring.checks import (check_eval_section, check_retriever,
                                    check_retriever_numbers, check_seed, check_workdir)
  c = f.config
  if not f.suite and not f.data and f.split not in SPLITS:
    raise ValueError(f"--split={f.split!r}: the config's data has the splits {SPLITS}")
  check_seed(c.seed)
  check_eval_section(c.eval)
  if (f.suite and not f.out) or (not f.suite and not f.data and c.data.source == "world"):
    check_workdir(c.workdir)
  if f.out and os.path.exists(f.out) and not os.path.isdir(f.out):
    raise ValueError(f"--out {f.out}: an existing file, not a directory for the predictions")
  if f.data and not os.path.exists(f.data):
    raise FileNotFoundError(f"--data {f.data}: no such file")
  r = c.retriever
  check_retriever_numbers(r)
  index, url = (f.index or "", f.url or "") if (f.index or f.url) else (r.index, r.url)
  check_retriever(index, url, timeout=r.timeout)


def parse_flags(argv):
  """`ragjax.errors.flags_parser`'s one-line errors, with `dataset_override_error`'s first."""
  try:
    return flags.FLAGS(argv)
  except Exception:  # noqa: BLE001  (every flag mistake gets one line)
    from ragjax.recipes.eval_suite import dataset_override_error
    msg = (None if os.environ.get("RAGJAX_TRACEBACK")
           else dataset_override_error(argv, DEFAULT_CONFIG))
    if msg:
      print(f"ragjax.evaluate: error: {msg}", file=sys.stderr)
      sys.exit(2)
    flags.FLAGS.unparse_flags()
    return flags_parser("ragjax.evaluate")(argv)


if __name__ == "__main__":
  sys.exit(app.run(main, flags_parser=parse_flags))
