"""Prompts that share a head (`sampler.shared_prefix`) against one whole forward per prompt.

    python -m ragjax.bench.shared_prefix                       # SmolLM2, 50 test questions
    python -m ragjax.bench.shared_prefix --questions 100 --checkpoint runs/smollm2_d24/policy

Builds the config's policy (`--checkpoint`: another HF directory or GGUF file), its questions,
BM25 index (under `--workdir`) and greedy evaluation engine, and the first `--questions` test
questions; then evaluates them `--repeats` times with each arm, alternating so both see the
same machine load: the reference (`shared_prefix` 0: every prompt prefilled whole, padded to
its bucket) and the config's unit (the head every prompt starts with run once per batch, the
tails after it).  Batches of `eval.batch_size` as the evaluation runs them.  Prints one JSON
line: per arm the best seconds, the prefill's seconds and the prompt positions it computed;
`speedup` (reference seconds / shared seconds) and `same_answers` (questions whose answer text
is the same in both arms).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

CONFIG = "configs/smollm2.py"


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--config", default=CONFIG)
  ap.add_argument("--checkpoint", default="", help="policy (default: the config's model)")
  ap.add_argument("--workdir", default="runs/bench_shared_prefix",
                  help="where the BM25 index is built once")
  ap.add_argument("--questions", type=int, default=50)
  ap.add_argument("--repeats", type=int, default=1)
  ap.add_argument("--unit", type=int, default=0,
                  help="the shared arm's `shared_prefix` (default: the config's, else 64)")
  args = ap.parse_args(argv)

  from ragjax.rollout.factory import make_engine
  from ragjax.rollout.protocols.base import as_prompt_input
  from ragjax.wiring import components
  from ragjax.wiring.config_files import load_config

  c = load_config(args.config)
  c.workdir = args.workdir
  if args.checkpoint:
    c.model.checkpoint = args.checkpoint
  unit = args.unit or int(c.sampler.get("shared_prefix", 0)) or 64
  setup = components.load_data(c, args.workdir)
  cfg, params, tok = components.load_policy(c, setup.tokenizer)
  records = setup.splits["test"][:args.questions]
  batch = int(c.eval.batch_size)

  arms = {"reference": 0, "shared": unit}
  engines, best, prefill_s, answers = {}, {}, {}, {}
  for name, value in arms.items():
    c.sampler.shared_prefix = value
    engines[name] = make_engine(c, cfg, params, tok, setup.retriever, greedy=True, hooks=[],
                                evaluation=True)
    prefill_s[name] = timed_prefill(engines[name].sampler)
  for _ in range(args.repeats):
    for name, engine in engines.items():
      prefill_s[name].clear()
      t0 = time.perf_counter()
      got = []
      for s in range(0, len(records), batch):
        chunk = records[s:s + batch]
        out = engine.run(chunk + [chunk[0]] * (batch - len(chunk)), samples_per_prompt=1)
        got += [row.answer for row in out.rows[:len(chunk)]]
      seconds = time.perf_counter() - t0
      if seconds < best.get(name, (float("inf"),))[0]:
        best[name] = (seconds, sum(prefill_s[name]))
      answers[name] = got
  engine = engines["shared"]
  positions = {"reference": 0, "shared": 0}
  for s in range(0, len(records), batch):
    chunk = records[s:s + batch]
    ids = [engine.context.prompt_ids(as_prompt_input(r)) for r in chunk]
    ids += [ids[0]] * (batch - len(ids))
    lens = [len(p) for p in ids]
    width = max(_bucket(engine.sampler.config.prompt_buckets, n) for n in lens)
    tokens = np.zeros((len(ids), width), np.int32)
    for i, p in enumerate(ids):
      tokens[i, :len(p)] = p
    head, tail = engine.sampler.shared_head(tokens, lens, width)
    positions["reference"] += len(ids) * width
    positions["shared"] += head + len(ids) * tail if head else len(ids) * width
  result = {
      "config": args.config, "checkpoint": c.model.checkpoint, "questions": len(records),
      "batch": batch, "unit": unit, "repeats": args.repeats,
      **{f"{k}_s": round(best[k][0], 1) for k in arms},
      **{f"{k}_prefill_s": round(best[k][1], 1) for k in arms},
      **{f"{k}_prefill_positions": positions[k] for k in arms},
      "speedup": round(best["reference"][0] / best["shared"][0], 3),
      "same_answers": sum(a == b for a, b in zip(answers["reference"], answers["shared"]))}
  print(json.dumps(result))
  return result


def timed_prefill(sampler) -> list:
  """Wraps the sampler's `prefill` (and `refill`) to record each call's seconds, the result
  ready; returns the list they are appended to."""
  import jax
  seconds = []

  def wrap(fn):
    def timed(*a, **kw):
      t0 = time.perf_counter()
      out = jax.block_until_ready(fn(*a, **kw))
      seconds.append(time.perf_counter() - t0)
      return out
    return timed
  sampler.prefill = wrap(sampler.prefill)
  if hasattr(sampler, "refill"):
    sampler.refill = wrap(sampler.refill)
  return seconds


def _bucket(buckets, n: int) -> int:
  from ragjax.parallel.buckets import pick_bucket
  return pick_bucket(buckets, n, "prompt")


if __name__ == "__main__":
  main()
