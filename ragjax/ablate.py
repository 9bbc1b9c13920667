"""`python -m ragjax.ablate --config=FILE[:ARG] --a NAME:FIELD=V;... --b NAME:FIELD=V;...`

    python -m ragjax.ablate --config=configs/signatures.py:rezero   # arms from its `ablation`

Two arms that differ by config overrides, started from the same cold start (or initial policy)
with the same seeds, evaluated on the same questions; prints EM per arm and the paired
difference with a 95% bootstrap interval, overall and by question type, and writes
`<workdir>/ablation/ablation.{md,json}`.  Pointed at the workdir of an earlier training run
(`--config.workdir=runs/world`) it reuses that run's world, index and cold start.  Example, Search-R1's own ablation on the embedded world
(retrieved tokens masked vs not):

    python -m ragjax.ablate --a "masked:rl.use_sampler_logprobs=False" \
        --b "unmasked:rl.use_sampler_logprobs=False;rl.train_on=('policy','retrieved')"

(the sampler has no log-probs for retrieved tokens, so both arms re-score the old policy).

The same ablation run again with another seed (`--config.seed=1 --config.workdir=...`) is one
more training run per arm; `--pool` prints the runs' comparison pooled question by question
(trains nothing):

    python -m ragjax.ablate --pool=runs/s0/ablation/ablation.json,runs/s1/ablation/ablation.json
"""

from __future__ import annotations

import sys

from absl import app, flags

from ragjax.errors import define_config_flag, flags_parser
from ragjax.recipes import DEFAULT_CONFIG

define_config_flag(DEFAULT_CONFIG, lock_config=False)
flags.DEFINE_string("a", None, "arm A: NAME:FIELD=VALUE;FIELD=VALUE... (';'-separated; "
                    "NAME:start = the shared start, untrained); default 'a:' (no overrides)")
flags.DEFINE_string("b", None, "arm B, as --a; both default to the config's `ablation` "
                    "section (a, b) when it has one (configs/signatures.py)")
flags.DEFINE_string("split", "test", "split both arms are evaluated on")
flags.DEFINE_list("pool", None, "ablation.json files of one ablation run with different seeds: "
                  "print their comparison pooled question by question, train nothing")


def parse_arm(spec: str) -> tuple[str, list[str]]:
  name, sep, rest = spec.partition(":")
  if not sep or not name.strip():
    raise ValueError(f"arm {spec!r}: write NAME:FIELD=VALUE;... (NAME: for no overrides)")
  return name.strip(), [o.strip() for o in rest.split(";") if o.strip()]


def arm_specs(a, b, config) -> tuple[str, str]:
  """The two arms: the flags, else the config's `ablation` section (its a and b)."""
  if b is not None:
    return (a or "a:"), b
  section = config.get("ablation")
  if a is None and section is not None:
    return section.a, section.b
  raise ValueError("give the arms: --b (and --a), or a config with an `ablation` section "
                   "(e.g. --config=configs/signatures.py:search_r1)")


def main(argv):
  from absl import logging
  from ragjax.errors import exit_on_user_error
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}", exitcode=2)
  if flags.FLAGS.pool:
    with exit_on_user_error("ragjax.ablate"):
      from ragjax.eval.ablation_report import pool_reports
      from ragjax.typed_config import read_json
      reports = [read_json(p) for p in flags.FLAGS.pool]
      for path, report in zip(flags.FLAGS.pool, reports):
        missing = [k for k in ("workdir", "split", "arms", "qtypes", "em")
                   if not isinstance(report, dict) or k not in report]
        if missing:
          raise ValueError(f"{path}: not an ablation.json of `python -m ragjax.ablate` "
                           f"(no {', '.join(missing)})")
      print(pool_reports(reports)["table"])
    return
  with exit_on_user_error("ragjax.ablate"):
    arms = dict(parse_arm(spec) for spec in arm_specs(flags.FLAGS.a, flags.FLAGS.b,
                                                        flags.FLAGS.config))
    if len(arms) != 2:
      raise ValueError("the two arms need different names")
    from ragjax.parallel.cpu_threads import pin_config
    pin_config(flags.FLAGS.config)   # before JAX's CPU backend starts
    from ragjax.parallel.backend import start
    start("ragjax.ablate", flags.FLAGS.config, target=flags.FLAGS.config.get("hardware", ""))
    from ragjax.recipes.ablation import ablate
    report = ablate(flags.FLAGS.config, arms, split=flags.FLAGS.split)
  print(report["table"])
  print()
  print(report["full_table"])


if __name__ == "__main__":
  sys.exit(app.run(main, flags_parser=flags_parser("ragjax.ablate")))
