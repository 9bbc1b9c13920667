"""Writes the synthetic world to disk: FlashRAG corpus + question files and the tokenizer.

    python -m ragjax.data.make_world --out runs/world [--seed 0] [--vocab_size 2048]

gives runs/world/{corpus,train,dev,test}.jsonl (the retrieval package indexes corpus.jsonl)
and runs/world/tokenizer/ (load with transformers.AutoTokenizer.from_pretrained).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

from ragjax.data.tokenizer import min_vocab_size, train_world_tokenizer
from ragjax.data.world import BOUNDS, WorldConfig, generate_world, write_flashrag
from ragjax.retrieval.argtypes import float_range, int_range


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", required=True)
  parser.add_argument("--vocab_size", type=int_range(min_vocab_size()), default=2048)
  for f in dataclasses.fields(WorldConfig):
    if f.type in ("int", "float"):
      lo, hi = BOUNDS.get(f.name, (None, None))
      kind = int_range(lo, hi) if f.type == "int" else float_range(lo, hi)
      parser.add_argument(f"--{f.name}", type=kind, default=f.default)
    elif f.type == "bool":
      parser.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=f.default)
  args = parser.parse_args(argv)
  try:      # what no single flag can check (e.g. every question count 0)
    cfg = WorldConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(WorldConfig)
                         if hasattr(args, f.name)})
  except ValueError as e:
    parser.error(str(e))
  t0 = time.time()
  world = generate_world(cfg)
  paths = write_flashrag(world, args.out)
  tok = train_world_tokenizer(os.path.join(args.out, "tokenizer"), world=world, vocab_size=args.vocab_size)
  summary = {"out": args.out, "passages": len(world.passages),
             **{f"num_{s}": len(q) for s, q in world.questions.items()},
             "vocab": len(tok), "seconds": round(time.time() - t0, 2), "files": paths}
  print(json.dumps(summary))
  return summary


if __name__ == "__main__":
  main()
