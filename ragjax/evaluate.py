"""`python -m ragjax.evaluate --checkpoint DIR [--config FILE] [--split test] [--data F] [--index D]`

Evaluates a policy checkpoint (an HF directory with its tokenizer, as `python -m ragjax.train`
writes to `<workdir>/policy`) with greedy decoding and prints the same table as training:
EM with bootstrap intervals by question type, with retrieval and with retrieval disabled.
`--samples K --temperature T` adds sampled pass@1 and pass@K rows (how much an RL update
could still sharpen).

* World datasets (default): the config's world is regenerated (deterministic from its seed)
  and its index opened from `<workdir>/index` (built if missing).
* Any other dataset the data package reads: `--data FILE` (FlashRAG jsonl, verl parquet,
  HotpotQA / 2Wiki / MuSiQue raw json) with `--index DIR` (an index built by
  `python -m ragjax.retrieval.build`) or `--url` of a Search-R1 retrieval server.
"""

from __future__ import annotations

import argparse
import os
import sys

from ragjax.recipes.world import (NullRetriever, evaluate_system, log, results_table,
                                  sample_system)


def _load_config(path: str):
  """An ml-collections config file, with an optional `:arg`."""
  import importlib.util
  file, _, arg = path.partition(":")
  spec = importlib.util.spec_from_file_location("ragjax_eval_config", file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


READERS = {
    "flashrag": ("ragjax.data.flashrag", "read_flashrag"),
    "verl": ("ragjax.data.verl", "read_verl"),
    "hotpotqa": ("ragjax.data.hotpotqa", "read_hotpotqa"),
    "2wiki": ("ragjax.data.twowiki", "read_twowiki"),
    "musique": ("ragjax.data.musique", "read_musique"),
}


def _read_examples(path: str, fmt: str | None):
  """Questions from a dataset file; the format comes from --format or the file extension."""
  import importlib
  if fmt is None:
    fmt = {".jsonl": "flashrag", ".parquet": "verl"}.get(os.path.splitext(path)[1])
    if fmt is None:
      raise ValueError(f"{path}: pass --format, one of {sorted(READERS)}")
  if fmt not in READERS:
    raise ValueError(f"unknown --format {fmt!r}; known: {sorted(READERS)}")
  module, fn = READERS[fmt]
  return list(getattr(importlib.import_module(module), fn)(path))


def main(argv=None) -> int:
  from ragjax.train import DEFAULT_CONFIG
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--checkpoint", required=True, help="HF policy directory (with tokenizer)")
  p.add_argument("--config", default=DEFAULT_CONFIG, help="config file[:arg] (rollout settings)")
  p.add_argument("--split", default="test", help="world split: train | dev | test")
  p.add_argument("--data", default=None, help="a dataset file instead of the world")
  p.add_argument("--format", default=None, choices=sorted(READERS), help="format of --data")
  p.add_argument("--index", default=None, help="retrieval index directory")
  p.add_argument("--url", default=None, help="Search-R1 retrieval server URL instead of --index")
  p.add_argument("--limit", type=int, default=0, help="evaluate the first N questions only")
  p.add_argument("--workdir", default=None, help="override the config's workdir")
  p.add_argument("--samples", type=int, default=0,
                 help="also sample this many rollouts per question: pass@1 and pass@k rows")
  p.add_argument("--temperature", type=float, default=1.0, help="temperature for --samples")
  args = p.parse_args(argv)
  if args.samples < 0 or (args.samples and args.temperature <= 0):
    p.error("--samples must be >= 0 and --temperature > 0")

  from ragjax.models.hf_io import load_decoder, load_tokenizer
  c = _load_config(args.config)
  if args.workdir:
    c.workdir = args.workdir
  cfg, params = load_decoder(args.checkpoint)
  tok = load_tokenizer(args.checkpoint)
  if args.data:
    examples = _read_examples(args.data, args.format)
    split = os.path.basename(args.data)
  else:
    from ragjax.data.world import generate_world
    from ragjax.recipes.world import world_config
    examples = generate_world(world_config(c)).questions[args.split]
    split = args.split
  if args.limit:
    examples = examples[:args.limit]
  if args.url:
    from ragjax.retrieval import SearchClient
    retriever = SearchClient(args.url)
  elif args.index:
    from ragjax.retrieval import open_index
    retriever = open_index(args.index)
  elif not args.data:
    from ragjax.data.world import generate_world, write_flashrag
    from ragjax.recipes.world import build_retriever, world_config
    world = generate_world(world_config(c))
    paths = write_flashrag(world, os.path.join(os.path.abspath(c.workdir), "world"))
    retriever = build_retriever(c, paths["corpus"], os.path.abspath(c.workdir))
  else:
    p.error("--data needs --index or --url")
  log(f"evaluating {args.checkpoint} on {len(examples)} questions of {split}")
  results = [evaluate_system(c, "policy + retrieval", cfg, params, tok, retriever, examples, split),
             evaluate_system(c, "policy, no retrieval", cfg, params, tok, NullRetriever(),
                             examples, split)]
  if args.samples:
    results += sample_system(c, "policy + retrieval", cfg, params, tok, retriever, examples,
                             split, samples=args.samples, temperature=args.temperature)
  table, _ = results_table(results)
  print(table)
  return 0


if __name__ == "__main__":
  sys.exit(main())
