"""Continuous batching: a rollout in waves that refill freed rows, against fixed waves.

    python -m ragjax.bench.refill --workdir runs/world --checkpoint runs/world/cold_start_policy
    python -m ragjax.bench.refill --config configs/world.py --workdir W --checkpoint C \\
        --questions 64 --wave-rows 16 --samples 1

Loads the config's data (its world and index, from `--workdir`, as `python -m ragjax.evaluate`
does) and a policy checkpoint, then rolls out the first `--questions` test questions three
times on the same engine settings, greedy: every row at once (`wave_rows=0`), fixed waves of
`--wave-rows` rows (`rollout.refill=False`) and refilled waves (`rollout.refill=True`).  It
checks the three give the same tokens and prints one JSON line per mode: wall seconds (after
a warm-up run of each, so compile time is not counted), decode calls, the mean share of the
sampler's rows that were live per decode call, and the rows' turn counts.  Refill pays off when
rows end at different turns (a policy that answers some questions at once and searches others
three times); an untrained policy, whose rows all run to the turn limit, shows no gain.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from ragjax.wiring import components as parts
from ragjax.wiring.config_files import apply_overrides, load_config


class CountingPolicy:
  """The engine's sampler, counting decode calls and the rows each one had live."""

  def __init__(self, sampler):
    self.sampler, self.decodes, self.live = sampler, 0, []

  def decode(self, state):
    done = np.asarray(state.finished)
    self.decodes += 1
    self.live.append(float((~done).mean()))
    return self.sampler.decode(state)

  def __getattr__(self, name):
    return getattr(self.sampler, name)


def rollout(c, cfg, params, tok, retriever, questions, samples: int, wave: int, refill: bool):
  from ragjax.rollout.factory import make_engine
  c = c.copy_and_resolve_references()
  c.rollout.wave_rows, c.rollout.refill = wave, refill
  engine = make_engine(c, cfg, params, tok, retriever, greedy=True, hooks=[], evaluation=True)
  engine.run(questions, samples_per_prompt=samples, seed=c.seed)       # warm-up (compiles)
  counting = CountingPolicy(engine.sampler)
  engine.sampler = counting
  t0 = time.perf_counter()
  batch = engine.run(questions, samples_per_prompt=samples, seed=c.seed)
  seconds = time.perf_counter() - t0
  turns = [len(m.turns) for m in batch.meta.rows]
  return batch, {"bench": "refill", "mode": ("one wave" if not wave else
                                             "refilled waves" if refill else "fixed waves"),
                 "wave_rows": wave or None, "rows": len(turns), "seconds": round(seconds, 2),
                 "decode_calls": counting.decodes,
                 "live_row_share": round(float(np.mean(counting.live)), 3),
                 "turns_mean": round(float(np.mean(turns)), 2), "turns_max": max(turns),
                 "refilled_groups": batch.stats.get("refilled_groups", 0)}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", default="configs/world.py")
  ap.add_argument("--workdir", required=True, help="the run's workdir (world, index)")
  ap.add_argument("--checkpoint", required=True, help="HF policy directory (with tokenizer)")
  ap.add_argument("--questions", type=int, default=64)
  ap.add_argument("--samples", type=int, default=1)
  ap.add_argument("--wave-rows", type=int, default=16)
  ap.add_argument("--split", default="test")
  ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
  args = ap.parse_args(argv)
  if args.questions < 1 or args.samples < 1 or args.wave_rows < args.samples:
    ap.error("--questions and --samples must be >= 1 and --wave-rows >= --samples")
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  c = apply_overrides(load_config(args.config), args.set)
  c.workdir = os.path.abspath(args.workdir)
  setup = parts.load_data(c, c.workdir)
  questions = setup.splits[args.split][:args.questions]
  cfg, params = load_decoder(args.checkpoint)
  tok = load_tokenizer(args.checkpoint)
  base = None
  for wave, refill in ((0, True), (args.wave_rows, False), (args.wave_rows, True)):
    batch, line = rollout(c, cfg, params, tok, setup.retriever, questions, args.samples, wave,
                          refill)
    tokens = np.asarray(batch.traj.tokens)
    if base is None:
      base = tokens
    line["same_tokens_as_one_wave"] = bool(tokens.shape == base.shape
                                           and np.array_equal(tokens, base))
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
