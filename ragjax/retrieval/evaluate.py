"""Recall@k of gold paragraphs and answer strings for a question file against an index.

    python -m ragjax.retrieval.evaluate --index DIR --questions FILE --k 10 [--backend exact]
        [--limit N] [--url http://127.0.0.1:8000 [--deadline S]]   (a running server instead)
        [--allow-pickle]   (open an index holding a pickle: only one you trust)

Prints a table for k in {1, 3, K} and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ragjax.retrieval.argtypes import float_range, positive_int


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  src = ap.add_mutually_exclusive_group(required=True)
  src.add_argument("--index", help="index directory")
  src.add_argument("--url", help="a running /retrieve server")
  ap.add_argument("--questions", required=True, help="HotpotQA / 2Wiki / MuSiQue / FlashRAG question file")
  ap.add_argument("--k", type=positive_int, default=10)
  ap.add_argument("--backend", choices=("scann", "exact", "bm25"), default=None)
  ap.add_argument("--limit", type=positive_int, default=None, help="first N questions only")
  ap.add_argument("--batch", type=positive_int, default=256, help="queries per search call")
  ap.add_argument("--deadline", type=float_range(0.1, 86_400), default=120.0,
                  help="with --url: seconds a search call waits out an unreachable server")
  ap.add_argument("--allow-pickle", action="store_true",
                  help="open an index directory that holds a pickle (it can run code; trusted indexes only)")
  args = ap.parse_args(argv)
  if not os.path.exists(args.questions):
    ap.error(f"--questions file not found: {args.questions}")

  from ragjax.retrieval.recall import format_table, read_questions, recall_table
  try:
    questions = read_questions(args.questions, args.limit)
  except (OSError, ValueError) as e:
    ap.error(f"--questions: {e}")
  if args.url:
    from ragjax.retrieval.client import SearchClient
    retriever = SearchClient(args.url, deadline=args.deadline,
                             timeout=min(30.0, args.deadline))
  else:
    from ragjax.retrieval.index import open_index
    try:
      retriever = open_index(args.index, backend=args.backend, allow_pickle=args.allow_pickle)
    except (OSError, ValueError) as e:
      ap.error(f"--index: {e}")
  t0 = time.time()
  hits = []
  from ragjax.errors import exit_on_user_error
  with exit_on_user_error("ragjax.retrieval.evaluate"):     # an unreachable server: one line
    for s in range(0, len(questions), args.batch):
      hits.extend(retriever.search([q.question for q in questions[s:s + args.batch]], args.k))
  secs = time.time() - t0
  ks = sorted({k for k in (1, 3, args.k) if k <= args.k})
  table = recall_table(questions, hits, ks)
  print(format_table(table, f"{args.questions} ({len(questions)} questions) vs {args.index or args.url}"))
  print(json.dumps({"questions": len(questions), "seconds": round(secs, 2),
                    "recall": {str(k): v for k, v in table.items()}}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
