"""`python -m ragjax.evaluate --checkpoint DIR [--config=FILE[:ARG]] [--config.FIELD=V ...]`

Evaluates a policy checkpoint (an HF directory with its tokenizer, as `python -m ragjax.train`
writes to `<workdir>/policy`) under any recipe's config (the same `--config` and overrides as
training: protocol, sampler, data, retriever), with greedy decoding, and prints EM with
bootstrap intervals by question type, with retrieval and with retrieval disabled.
`--samples K --temperature T` adds sampled pass@1 and pass@K rows (how much an RL update could
still sharpen).

* The config's data: the synthetic world is regenerated from its seed under
  `--config.workdir` (index reused or built there); question files come from `data.*_files`.
* `--data FILE` (FlashRAG jsonl, verl parquet, HotpotQA / 2Wiki / MuSiQue raw json) with
  `--index DIR` (from `python -m ragjax.retrieval.build`) or `--url` of a Search-R1 server.
"""

from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

from ragjax.recipes import DEFAULT_CONFIG

config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "experiment config (ml-collections)",
                                lock_config=True)
flags.DEFINE_string("checkpoint", None, "HF policy directory (with tokenizer)")
flags.DEFINE_string("split", "test", "split of the config's data: train | dev | test")
flags.DEFINE_enum("metric", "em", ["em", "f1", "cover_em", "letter_em", "math_equiv", "task"],
                  "answer metric; task: each record's task's (UR²: MCQ letter EM, math "
                  "equivalence, QA F1)")
flags.DEFINE_string("data", None, "a question file instead of the config's split")
flags.DEFINE_enum("format", None, ["flashrag", "verl", "hotpotqa", "2wiki", "musique"],
                  "format of --data (default: from its extension)")
flags.DEFINE_string("index", None, "retrieval index directory (overrides the config's)")
flags.DEFINE_string("url", None, "Search-R1 retrieval server URL (overrides the config's)")
flags.DEFINE_integer("limit", 0, "evaluate the first N questions only (0 = all)", lower_bound=0)
flags.DEFINE_integer("samples", 0, "also sample this many rollouts per question: pass@1 and "
                     "pass@k rows", lower_bound=0)
flags.DEFINE_float("temperature", 1.0, "temperature for --samples")
flags.mark_flag_as_required("checkpoint")


def main(argv):
  from absl import logging
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
  f = flags.FLAGS
  if f.samples and f.temperature <= 0:
    raise app.UsageError("--samples needs --temperature > 0", exitcode=2)
  if f.data and not (f.index or f.url or f.config.retriever.index or f.config.retriever.url):
    raise app.UsageError("--data needs --index or --url (or retriever.index / retriever.url "
                         "in the config)", exitcode=2)
  from ragjax.errors import exit_on_user_error
  from ragjax.recipes.components import EvalOptions, evaluate_checkpoint
  qtypes = None
  if f.config.data.source == "world" and not f.data:
    from ragjax.data.world import QTYPES
    qtypes = QTYPES
  with exit_on_user_error("ragjax.evaluate"):
    print(evaluate_checkpoint(f.config, EvalOptions(
        checkpoint=f.checkpoint, split=f.split, data=f.data, data_format=f.format,
        index=f.index, url=f.url, limit=f.limit, samples=f.samples,
        temperature=f.temperature, metric=f.metric), qtypes))


if __name__ == "__main__":
  sys.exit(app.run(main))
