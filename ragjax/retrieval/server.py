"""HTTP server speaking Search-R1's `/retrieve` protocol, so either side swaps with Search-R1's.

    python -m ragjax.retrieval.server --index DIR --port 8000 [--host 127.0.0.1] [--backend exact]
        [--max-queries 4096] [--max-query-chars 4096] [--max-topk 100] [--max-body-bytes 8388608]

`POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}` answers
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}` when return_scores is true
and, as Search-R1 does, the bare documents otherwise.  `GET /health` reports the backend, the
number of passages, the vector size and the limits (never a filesystem path).
A request may add `"contexts": {name: [one string per query]}` (UR²'s `tasks` and
`prev_reasoning`); a retriever with `search_with_context` (a task router, UR²'s summarising
proxy) gets them, a plain index ignores them.
Binds 127.0.0.1 unless --host says otherwise; `--port 0` takes any free port (the address is
printed).  No API docs pages are served.  An index directory holding a pickle is refused
unless --allow-pickle (see `ragjax.retrieval.trust`).

A request is checked before it reaches the index and every failure is a 4xx with a message in
`detail`: a body over --max-body-bytes is 413; a body that is not UTF-8 JSON (or is nested too
deeply to parse) is 400; wrong field types, more than --max-queries queries, a query longer
than --max-query-chars characters, topk outside 1..--max-topk, or a query holding a lone
surrogate (`"\\ud800"`: not Unicode text; rejected rather than silently altered) are 422.
Search-R1's trainer sends one request per rollout step (batch x samples queries), hence the
default of 4096 queries.

Query side (`ragjax.retrieval.query_batcher`): the queries of all concurrent requests go through one
encoder call per batch (fixed shapes at a few bucketed token widths, compiled for the two
narrowest at start-up), and query vectors are cached by text (--cache-size entries; results
are the same with or without the cache, and whatever a query is batched with).  A request is
submitted in chunks of 256 queries, one after another, so one large request does not stall
every other client for its whole duration.  Each reply carries `"timing"`: seconds queued,
encoding, searching and fetching passages, the batch size it rode in and how many of its
queries came from the cache (Search-R1 clients ignore the extra key).  A ScaNN index searches
with its tuned setting (`python -m ragjax.retrieval.tune`), reported by `/health`.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from typing import Optional

from starlette.requests import Request   # module level: FastAPI resolves the annotation by name

from ragjax.http_body import RequestError, parse_json, read_body
from ragjax.parallel.backend import beside_a_trainer, host_only, start
from ragjax.retrieval.argtypes import non_negative_int, port, positive_int
from ragjax.retrieval.types import Retriever

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one request may ask for."""
  max_queries: int = 4096
  max_query_chars: int = 4096
  max_topk: int = 100
  max_body_bytes: int = 8 << 20
  chunk: int = 256                  # queries per submitted chunk (and per encoder batch)


def parse_contexts(payload: dict, n: int) -> dict[str, list[str]]:
  """The optional per-query `contexts` ({name: [one string per query]}: UR²'s task and
  reasoning so far), checked."""
  contexts = payload.get("contexts") or {}
  if not isinstance(contexts, dict):
    raise RequestError(422, f"'contexts' must be an object of per-query string lists, got "
                            f"{type(contexts).__name__}")
  for name, values in contexts.items():
    if not isinstance(values, list) or len(values) != n:
      raise RequestError(422, f"contexts[{name!r}] must be a list of {n} strings (one per query)")
    for i, v in enumerate(values):
      if not isinstance(v, str) or _SURROGATE.search(v):
        raise RequestError(422, f"contexts[{name!r}][{i}] is not a valid string")
  return contexts


def parse_request(body: bytes, limits: Limits, default_topk: int) -> tuple[list[str], int, bool]:
  """(queries, k, return_scores) from a request body, or `RequestError` saying what is wrong."""
  queries, k, with_scores, _ = parse_request_with_contexts(body, limits, default_topk)
  return queries, k, with_scores


def parse_request_with_contexts(body: bytes, limits: Limits, default_topk: int
                                ) -> tuple[list[str], int, bool, dict]:
  """`parse_request` plus the request's per-query `contexts` (empty when it sends none)."""
  payload = parse_json(body)
  if not isinstance(payload, dict):
    raise RequestError(422, f"request body must be a JSON object, got {type(payload).__name__}")
  queries = payload.get("queries")
  if not isinstance(queries, list):
    raise RequestError(422, f"'queries' must be a list of strings, got {type(queries).__name__}")
  if len(queries) > limits.max_queries:
    raise RequestError(422, f"{len(queries)} queries in one request; the limit is "
                            f"{limits.max_queries} (--max-queries): split the batch")
  for i, q in enumerate(queries):
    if not isinstance(q, str):
      raise RequestError(422, f"queries[{i}] is {type(q).__name__}, expected a string")
    if len(q) > limits.max_query_chars:
      raise RequestError(422, f"queries[{i}] has {len(q)} characters; the limit is "
                              f"{limits.max_query_chars} (--max-query-chars)")
    bad = _SURROGATE.search(q)
    if bad:
      raise RequestError(422, f"queries[{i}] holds a lone surrogate U+{ord(bad[0]):04X} at "
                              f"character {bad.start()}: not valid Unicode text")
  k = payload.get("topk")
  k = default_topk if k is None else k
  if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= limits.max_topk:
    raise RequestError(422, f"topk must be in [1, {limits.max_topk}], got {k!r}")
  with_scores = payload.get("return_scores", False)
  if not isinstance(with_scores, bool):
    raise RequestError(422, f"'return_scores' must be true or false, got {with_scores!r}")
  return queries, k, with_scores, parse_contexts(payload, len(queries))


def make_app(retriever: Retriever, default_topk: int = 3, info: Optional[dict] = None,
             limits: Limits = Limits(), cache_size: int = 10_000):
  from fastapi import FastAPI
  from fastapi.responses import JSONResponse
  from starlette.concurrency import run_in_threadpool

  from ragjax.retrieval.query_batcher import QueryBatcher, Timing

  if not 1 <= default_topk <= limits.max_topk:
    raise ValueError(f"default topk {default_topk} is outside 1..{limits.max_topk}")
  app = FastAPI(title="ragjax retrieval", docs_url=None, redoc_url=None, openapi_url=None)
  # One worker owns the index and the encoder: requests are batched, never interleaved.
  batcher = QueryBatcher(retriever, max_batch=limits.chunk, cache_size=cache_size)
  app.state.batcher = batcher

  def search(queries: list[str], k: int, contexts: dict):
    hits, timing = [], Timing()
    t0 = time.perf_counter()
    for s in range(0, len(queries), limits.chunk):
      part, t = batcher.submit(queries[s:s + limits.chunk], k,
                               {name: v[s:s + limits.chunk] for name, v in contexts.items()})
      hits.extend(part)
      timing.add(t)
    return hits, {**timing.to_json(), "total_s": round(time.perf_counter() - t0, 6)}

  @app.exception_handler(RequestError)
  async def refuse(_, e: RequestError):
    return JSONResponse({"detail": str(e)}, status_code=e.status)

  @app.post("/retrieve")
  async def retrieve(request: Request):
    queries, k, with_scores, contexts = parse_request_with_contexts(
        await read_body(request, limits.max_body_bytes), limits, default_topk)
    hits, timing = await run_in_threadpool(search, queries, k, contexts)
    return JSONResponse({"result": [[h.to_search_r1(with_scores) for h in row] for row in hits],
                         "timing": timing})

  @app.get("/health")
  def health():
    return {"status": "ok", **(info or {}), "limits": dataclasses.asdict(limits)}

  return app


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--index", required=True, help="index directory from ragjax.retrieval.build")
  ap.add_argument("--port", type=port, default=8000, help="1..65535, or 0 for any free port")
  ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1 only)")
  ap.add_argument("--backend", choices=("scann", "exact", "bm25"), default=None,
                  help="override the index's backend (e.g. exact search over a ScaNN index's embeddings)")
  ap.add_argument("--topk", type=positive_int, default=3, help="default k when a request omits topk")
  ap.add_argument("--cache-size", type=non_negative_int, default=10_000,
                  help="query texts whose vectors the server keeps (LRU; 0 = no cache)")
  ap.add_argument("--query-batch-size", type=positive_int, default=None,
                  help="rows per query-encoder call (dense backends; default: see index.QUERY_BATCH_SIZE)")
  defaults = Limits()
  ap.add_argument("--max-queries", type=positive_int, default=defaults.max_queries,
                  help="queries per request")
  ap.add_argument("--max-query-chars", type=positive_int, default=defaults.max_query_chars,
                  help="characters per query")
  ap.add_argument("--max-topk", type=positive_int, default=defaults.max_topk, help="largest topk")
  ap.add_argument("--max-body-bytes", type=positive_int, default=defaults.max_body_bytes,
                  help="request body size")
  ap.add_argument("--allow-pickle", action="store_true",
                  help="open an index directory that holds a pickle (it can run code; trusted indexes only)")
  args = ap.parse_args(argv)
  if args.topk > args.max_topk:
    ap.error(f"argument --topk: must be <= --max-topk ({args.max_topk}), got {args.topk}")
  limits = Limits(args.max_queries, args.max_query_chars, args.max_topk, args.max_body_bytes)
  from ragjax.http_server import serve
  from ragjax.retrieval.index import QUERY_BATCH_SIZE, open_index, read_meta
  try:
    meta = read_meta(args.index)
    backend = args.backend or meta["backend"]
    if backend != "bm25":                  # the query encoder runs on JAX: backend line, check
      beside_a_trainer()                   # no 75% of the GPU reserved for a small encoder
      start("ragjax.retrieval.server")
    else:                                  # no model: JAX (which bm25s touches) stays on the CPU
      host_only()
    # Dense backends cache query vectors in the batcher; BM25 caches (query, k) hits.
    retriever = open_index(args.index, backend=args.backend, allow_pickle=args.allow_pickle,
                           cache_size=args.cache_size if backend == "bm25" else 0,
                           query_batch_size=args.query_batch_size or QUERY_BATCH_SIZE)
  except (OSError, ValueError) as e:
    ap.error(f"--index: {e}")
  info = {"backend": backend, "passages": meta["n"], "dim": meta.get("dim")}
  index = getattr(retriever, "index", None)
  if backend == "scann" and index is not None:
    info["search"] = {"leaves_to_search": index.leaves_to_search, "num_leaves": index.num_leaves,
                      "reorder": index.reorder_depth, "reorder_store": index.config.reorder_store,
                      "tuned": bool(meta.get("search"))}
    tuned = (meta.get("search") or {}).get("tuned") or {}
    for key in ("recall_tune", "recall_heldout", "target", "k"):
      if key in tuned:
        info["search"][key] = tuned[key]
  if hasattr(retriever, "encode"):           # compile the two narrowest query buckets now
    retriever.encode(["warm up"])
    retriever.encode([" ".join(["warm"] * 40)])
  serve(make_app(retriever, args.topk, info, limits, cache_size=args.cache_size), args.host,
        args.port, "ragjax.retrieval.server")


if __name__ == "__main__":
  main()
