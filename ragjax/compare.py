"""`python -m ragjax.compare --workdir D --configs FILE[:ARG] [FILE[:ARG] ...]`

    python -m ragjax.compare --workdir runs/compare --configs configs/smollm2.py \\
        configs/autorefine.py:smollm2 configs/rezero.py:smollm2

The papers' Table 1 for the given configs, the first being the Search-R1 reference: each
config's run (`python -m ragjax.train`, in `D/runs/<name>/`) run or reused when it finished
under the same config; every policy evaluated on the same questions: the reference config's
held-out test split (in place of the suite's `--heldout` column) and the rest of `--suite`
(default `covered`: HotpotQA, 2Wiki, MuSiQue); rows direct answer, retrieve-once RAG, cold
start, Search-R1 GRPO, each method; EM and F1 with 95% intervals per dataset and averaged, each
row's paired difference to Search-R1, searches per question, wall time; `D/table.md` and
`D/table.json`.  A killed comparison run again does only what is missing (a finished run or
evaluation is read back, an unfinished one resumes).  A config file that has no such variant
(`configs/autorefine.py:smollm2` before it is written), a failed run and `--skip` give a row
that says "not run" and why.  `--set FIELD=VALUE` changes every config (and its run), e.g. the
same budget for all: `--set trainer.num_steps=10`.  Every evaluated row is also written as one
row record (`D/rows/<row>.jsonl`: per-question scores, the run's config fingerprint, the
evaluation's key); `--rows_from DIR` puts rows measured elsewhere (a GPU box, an earlier session:
results/compare_smollm2/ holds this repository's) into the table without training or evaluating
them, when they were made by the same config on the same questions and settings.  Details:
ragjax/recipes/comparison.py, ragjax/eval/row_record.py.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from ragjax.errors import flags_parser

flags.DEFINE_list("configs", [], "config specs FILE[:ARG], comma-separated or one per argument "
                  "after the flags; the first is the Search-R1 reference")
flags.DEFINE_string("workdir", None, "the comparison's directory (runs, evaluations, table)")
flags.DEFINE_string("suite", "covered", "the evaluation suite of the reference config "
                    "(eval.suites)")
flags.DEFINE_string("heldout", "hotpotqa", "the suite column replaced by the reference "
                    "config's held-out test questions ('' = the suite's own file)")
flags.DEFINE_integer("limit", 0, "evaluate the first N questions of each dataset (0 = all)",
                     lower_bound=0)
flags.DEFINE_list("skip", [], "rows not to run: direct, rag, cold_start, or a config spec / "
                  "name")
flags.DEFINE_multi_string("set", [], "FIELD=VALUE override applied to every config "
                          "(repeatable)")
flags.DEFINE_list("rows_from", [], "directories (or files) of row records measured elsewhere "
                  "(another comparison's rows/, results/compare_smollm2): a row whose run or "
                  "evaluation is not here is read from its record when the record fits")
flags.DEFINE_string("data_root", None, "where the suite's files live (default eval.data_root, "
                    "else ../shared/data beside the repo)")


def check_workdir_readable(workdir) -> None:
  """The comparison's directory: writable where it will be made, readable where it exists."""
  from ragjax.wiring.checks import check_workdir
  if not workdir:
    raise ValueError("--workdir is required (the comparison's directory)")
  check_workdir(workdir)
  if os.path.exists(workdir) and not os.access(workdir, os.R_OK | os.W_OK | os.X_OK):
    raise PermissionError(f"--workdir {workdir}: not readable and writable by this process")


def main(argv):
  from absl import logging
  from ragjax.errors import exit_on_user_error
  logging.set_verbosity(logging.WARNING)
  f = flags.FLAGS
  with exit_on_user_error("ragjax.compare"):
    check_workdir_readable(f.workdir)
    specs = list(f.configs) + list(argv[1:])
    for spec in specs:               # a mistyped file: one line before the heavy imports
      if not os.path.isfile(spec.partition(":")[0]):
        raise FileNotFoundError(f"--configs {spec}: no config file "
                                f"{os.path.abspath(spec.partition(':')[0])}")
    from ragjax.recipes.comparison import Options, check_skip, compare, load_entries
    overrides = tuple(o.strip().removeprefix("--config.") for o in f.set)
    entries = load_entries(specs, overrides)
    check_skip(entries, f.skip)
    from ragjax.eval.row_record import read_rows
    read_rows(f.rows_from)           # a bad record: one line before any run
    opts = Options(workdir=f.workdir, suite=f.suite, heldout=f.heldout, limit=f.limit,
                   skip=tuple(f.skip), data_root=f.data_root, overrides=overrides,
                   rows_from=tuple(f.rows_from))
    ref = entries[0].config
    if ref is None:
      raise ValueError(f"--configs {entries[0].spec}: the first config is the Search-R1 "
                       f"reference and does not load ({entries[0].missing})")
    from ragjax.eval.suites import get_suite     # the suite and its column, before any run
    suite = get_suite(ref.eval, opts.suite)
    if opts.heldout and opts.heldout not in suite.keys:
      raise ValueError(f"--heldout {opts.heldout}: suite {suite.name} has no such dataset "
                       f"({', '.join(suite.keys)})")

    def start_backend():
      from ragjax.parallel.backend import start
      from ragjax.parallel.cpu_threads import pin_config
      pin_config(ref)                # before JAX's CPU backend starts
      start("ragjax.compare", ref)

    summary = compare(entries, opts, start_backend=start_backend)
  print(summary["markdown"])


if __name__ == "__main__":
  sys.exit(app.run(main, flags_parser=flags_parser("ragjax.compare")))
