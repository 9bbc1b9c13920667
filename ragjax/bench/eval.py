"""Evaluation throughput: questions/s of the suite harness against the bare rollout loop.

    python -m ragjax.bench.eval [--questions 8] [--batch 8] [--hidden 64] [--layers 2]
        [--new-tokens 32] [--obs-tokens 64] [--turns 4] [--repeats 2]

Writes a random Qwen2-shaped checkpoint with a BPE tokenizer trained here, a BM25 index over
the first 300 passages of the shared corpus and `--questions` questions of every Search-R1
dataset on this machine (`ragjax.data.prepare`), then, with the Search-R1 protocol, greedy:

1. reference: one `make_engine` and `engine.run` over the same fixed-size batches (what any
   evaluation has to do: rollouts only);
2. harness: `ragjax.eval.harness.run_suite` into a fresh directory (rollouts plus reading
   the files, scoring, trajectory records, fsynced JSONL per batch, progress).

Both start cold (a new engine compiles its shapes) and alternate `--repeats` times so they
see the same machine load; the best of each is kept.  A random policy writes every turn to
its budget (no answers), the most tokens per question the protocol allows.  Prints one JSON
line; `harness_overhead` = reference q/s / harness q/s (1.0 = no overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from ragjax.data.prepare import DEFAULT_DATA_ROOT, REPO


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--questions", type=int, default=8, help="per dataset")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--hidden", type=int, default=64)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--new-tokens", type=int, default=32)
  ap.add_argument("--obs-tokens", type=int, default=64)
  ap.add_argument("--turns", type=int, default=4)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--data_root", default=DEFAULT_DATA_ROOT)
  args = ap.parse_args(argv)
  from ragjax.wiring.config_files import sibling
  search_r1 = sibling(os.path.join(REPO, "configs", "search_r1.py"), "search_r1")
  from ragjax.bench.services import make_checkpoint
  from ragjax.data.prepare import prepare_suite
  from ragjax.eval.harness import dataset_config, run_suite
  from ragjax.eval.suites import get_suite, read_dataset
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  from ragjax.retrieval import open_index
  from ragjax.retrieval.index import build_index
  from ragjax.rollout.factory import make_engine

  with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
    ckpt = os.path.join(tmp, "policy")
    make_checkpoint(ckpt, args.hidden, args.layers)
    corpus = os.path.join(tmp, "corpus.jsonl")
    with open(os.path.join(args.data_root, "corpus",
                           "derived_multihop_wiki_passages_31144.jsonl")) as f, \
         open(corpus, "w") as g:
      g.writelines(line for _, line in zip(range(300), f))
    build_index([corpus], os.path.join(tmp, "index"), "bm25", progress=False)
    retriever = open_index(os.path.join(tmp, "index"))
    man = prepare_suite("search_r1", os.path.join(tmp, "data"), args.data_root,
                        args.questions, allow_missing=True)
    c = search_r1.get_config("tiny")
    s = c.eval.suites.search_r1
    for key in man["missing"]:
      del s.datasets[key]
      s.columns = tuple(k for k in s.columns if k != key)
      s.groups = {t: tuple(k for k in ks if k != key) for t, ks in s.groups.items()}
    for key, d in man["datasets"].items():
      s.datasets[key].file, s.datasets[key].format = d["file"], "flashrag"
    s.sampler = {"max_new_tokens": args.new_tokens}
    s.protocol.update(dict(obs_max_tokens=args.obs_tokens, max_turns=args.turns))
    c.eval.batch_size = args.batch
    # the bench tokenizer is trained on a few sentences: real questions take more tokens
    c.sampler.update(dict(max_cache_length=2048, prompt_buckets=(128, 256, 512, 1024)))
    c.rollout.widths = tuple(range(256, 2049, 256))
    suite = get_suite(c.eval, "search_r1")
    root = os.path.join(tmp, "data")
    cfg, params = load_decoder(ckpt)
    tok = load_tokenizer(ckpt)
    records = {d.key: read_dataset(d, root) for d in suite.datasets}
    n = sum(len(r) for r in records.values())

    def reference():
      engine = make_engine(dataset_config(c, suite, suite.datasets[0]), cfg, params, tok,
                           retriever, greedy=True, hooks=[])
      for recs in records.values():
        for i in range(0, len(recs), args.batch):
          chunk = recs[i:i + args.batch]
          engine.run(chunk + [chunk[0]] * (args.batch - len(chunk)), samples_per_prompt=1,
                     seed=c.seed + i)

    def harness(k):
      run_suite(c, suite, root, os.path.join(tmp, f"out{k}"), policy=(cfg, params, tok),
                retriever=retriever, log=lambda m: None)

    t_ref = t_harness = float("inf")
    for k in range(args.repeats):
      t0 = time.perf_counter()
      reference()
      t_ref = min(t_ref, time.perf_counter() - t0)
      t0 = time.perf_counter()
      harness(k)
      t_harness = min(t_harness, time.perf_counter() - t0)
  out = {"questions": n, "datasets": len(records), "batch": args.batch,
         "model": f"hidden {args.hidden}, {args.layers} layers",
         "turns": args.turns, "new_tokens_per_turn": args.new_tokens,
         "reference_q_per_s": round(n / t_ref, 3), "harness_q_per_s": round(n / t_harness, 3),
         "harness_overhead": round(t_harness / t_ref, 3)}
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
