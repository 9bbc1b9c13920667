"""HTTP server speaking Search-R1's `/retrieve` protocol, so either side swaps with Search-R1's.

    python -m ragjax.retrieval.serve --index DIR --port 8000 [--host 127.0.0.1] [--backend exact]

`POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}` answers
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}` when return_scores is true
and, as Search-R1 does, the bare documents otherwise.  `GET /health` reports the index size.
Binds 127.0.0.1 unless --host says otherwise.  An index directory holding a pickle is refused
unless --allow-pickle (see `ragjax.retrieval.trust`).
"""

from __future__ import annotations

import argparse
import threading
from typing import List, Optional

from pydantic import BaseModel

from ragjax.retrieval.argtypes import non_negative_int, port, positive_int
from ragjax.retrieval.types import Retriever

MAX_TOPK = 1000


class QueryRequest(BaseModel):
  """Search-R1's request body (module level so FastAPI can resolve the annotation)."""
  queries: List[str]
  topk: Optional[int] = None
  return_scores: bool = False


def make_app(retriever: Retriever, default_topk: int = 3, info: Optional[dict] = None):
  from fastapi import FastAPI, HTTPException

  app = FastAPI(title="ragjax retrieval")
  lock = threading.Lock()   # backends hold one index; serialise batches rather than interleave

  @app.post("/retrieve")
  def retrieve(req: QueryRequest):
    k = req.topk or default_topk
    if not 1 <= k <= MAX_TOPK:
      raise HTTPException(status_code=422, detail=f"topk must be in [1, {MAX_TOPK}], got {k}")
    with lock:
      hits = retriever.search(req.queries, k)
    return {"result": [[h.to_search_r1(req.return_scores) for h in row] for row in hits]}

  @app.get("/health")
  def health():
    return {"status": "ok", **(info or {})}

  return app


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--index", required=True, help="index directory from ragjax.retrieval.build")
  ap.add_argument("--port", type=port, default=8000, help="1..65535, or 0 for any free port")
  ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1 only)")
  ap.add_argument("--backend", choices=("scann", "exact", "bm25"), default=None,
                  help="override the index's backend (e.g. exact search over a ScaNN index's embeddings)")
  ap.add_argument("--topk", type=positive_int, default=3, help="default k when a request omits topk")
  ap.add_argument("--cache-size", type=non_negative_int, default=0, help="server-side LRU cache entries")
  ap.add_argument("--query-batch-size", type=positive_int, default=None,
                  help="rows per query-encoder call (dense backends; default: see index.QUERY_BATCH_SIZE)")
  ap.add_argument("--allow-pickle", action="store_true",
                  help="open an index directory that holds a pickle (it can run code; trusted indexes only)")
  args = ap.parse_args(argv)
  import uvicorn
  from ragjax.retrieval.index import QUERY_BATCH_SIZE, open_index
  try:
    retriever = open_index(args.index, backend=args.backend, cache_size=args.cache_size,
                           allow_pickle=args.allow_pickle,
                           query_batch_size=args.query_batch_size or QUERY_BATCH_SIZE)
  except (OSError, ValueError) as e:
    ap.error(f"--index: {e}")
  info = {"index": args.index, "backend": args.backend or "default",
          "passages": len(getattr(getattr(retriever, "inner", retriever), "store", []))}
  uvicorn.run(make_app(retriever, args.topk, info), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
  main()
