"""Tune a ScaNN index's search setting (leaves probed, re-scoring depth) on your own queries.

    python -m ragjax.retrieval.tune --index DIR --queries FILE [--target 0.95] [--k 10]
        [--holdout 0.5] [--limit N] [--repeats 3] [--dry-run] [--allow-pickle]

FILE holds queries like the ones the index will serve: a question file (jsonl or a JSON list of
records with "question", "question_text" or "query"; every QA format `evaluate` reads), or a
`.txt` file with one query per line.  The queries are encoded as the server encodes them, and
exact search over the index's embeddings (streamed from tensorstore, so any size) is the ground
truth.  They are split (seeded) into a tuning part and a held-out part:

1. on the tuning part, for each number of leaves probed (a geometric grid up to all leaves) the
   smallest re-scoring depth whose recall@k against exact search meets the target is found;
   "meets" means the one-sided 95% lower confidence bound of the mean per-query recall
   (mean - 1.645 sd / sqrt(n)) is at least the target, so the choice is not luck of the sample;
2. those settings are timed (best of --repeats, alternating) and the fastest is chosen;
3. the held-out part checks it: its recall is recorded beside the tuning recall, with a warning
   when it falls below the target.

The setting goes into DIR/index.json under "search" (unless --dry-run); `open_index`, the
server and `evaluate` then search with it.  Prints the sweep and one JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np

from ragjax.retrieval.argtypes import float_range, positive_int
from ragjax.retrieval.records import RecordError, iter_json_records

Z_95 = 1.645                         # one-sided 95% normal quantile
QUERY_FIELDS = ("question", "question_text", "query")


def read_queries(path: str, limit: Optional[int] = None) -> list[str]:
  """Query texts from a question file or a .txt file; a record without one is an error naming it."""
  out: list[str] = []
  if path.endswith(".txt"):
    with open(path, encoding="utf-8") as f:
      out = [line.strip() for line in f if line.strip()]
    return out[:limit] if limit else out
  for loc, rec in iter_json_records(path):
    if limit is not None and len(out) >= limit:
      break
    if isinstance(rec, RecordError):
      raise ValueError(f"{loc}: {rec.detail}")
    text = next((rec[f] for f in QUERY_FIELDS if isinstance(rec.get(f), str)), None)
    if text is None:
      raise ValueError(f"{loc}: record has no string field {' / '.join(QUERY_FIELDS)}")
    if text.strip():
      out.append(text)
  return out


def split(n: int, holdout: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """(tuning rows, held-out rows) of a seeded permutation of range(n)."""
  order = np.random.default_rng(seed).permutation(n)
  cut = n - int(round(n * holdout))
  return np.sort(order[:cut]), np.sort(order[cut:])


def per_query_recall(rows: np.ndarray, truth: np.ndarray) -> np.ndarray:
  """|top-k ∩ exact top-k| / |exact top-k| per query (exact's -1 padding not counted)."""
  out = np.empty(len(truth))
  for i, (got, ref) in enumerate(zip(rows, truth)):
    ref = set(ref[ref >= 0].tolist())
    out[i] = len(ref & set(got.tolist())) / max(len(ref), 1)
  return out


def lower_bound(recalls: np.ndarray, z: float = Z_95) -> float:
  """Mean minus z standard errors (0 spread with one query: the mean itself)."""
  if len(recalls) < 2:
    return float(np.mean(recalls))
  return float(np.mean(recalls) - z * np.std(recalls, ddof=1) / math.sqrt(len(recalls)))


def leaves_grid(num_leaves: int) -> list[int]:
  """1, 2, 3, 5, 8, ... (x1.5) up to and including all leaves."""
  grid, x = {num_leaves}, 1.0
  while x < num_leaves:
    grid.add(int(round(x)))
    x *= 1.5
  return sorted(grid)


def reorder_grid(k: int, n: int, max_reorder: int = 1600) -> list[int]:
  base = {k, 20, 50, 100, 200, 400, 800, 1600, max_reorder}
  return sorted(r for r in base if k <= r <= min(max_reorder, max(n, k)))


def _timed_search(index, queries, k, leaves, reorder):
  t0 = time.perf_counter()
  rows, _ = index.search(queries, k, leaves_to_search=leaves, reorder=reorder)
  return rows, time.perf_counter() - t0


def sweep(index, queries: np.ndarray, truth: np.ndarray, k: int, target: float,
          z: float = Z_95, max_reorder: int = 1600) -> tuple[list[dict], list[dict]]:
  """Recall of each (leaves, depth) tried on `queries`; returns (all rows, feasible frontier).

  Leaves counts go up the grid; at each, depths go up to the first whose lower bound meets
  `target` (deeper is only slower), or until recall stops rising (the probed leaves hold no
  better candidates).  Once (L, R) meets it, more leaves are only worth trying at depths below
  R.  The sweep ends when no such depth is left, when two more leaf counts in a row add no
  recall, or when the least depth at this many leaves already takes 3x the fastest feasible
  setting's time."""
  table, frontier = [], []
  best_s, cap, stale = math.inf, max_reorder, 0
  seen: dict[tuple[int, int], float] = {}
  previous_leaves = None
  for leaves in leaves_grid(index.num_leaves):
    depths = [d for d in reorder_grid(k, index.n, max_reorder) if d <= cap]
    if not depths:
      break
    last = -1.0
    for depth in depths:
      rows, secs = _timed_search(index, queries, k, leaves, depth)
      rec = per_query_recall(rows, truth)
      row = {"leaves_to_search": leaves, "reorder": depth, "recall": round(float(rec.mean()), 4),
             "lower_bound": round(lower_bound(rec, z), 4), "seconds": secs}
      table.append(row)
      seen[(leaves, depth)] = row["recall"]
      if row["lower_bound"] >= target:
        frontier.append(row)
        best_s, cap = min(best_s, secs), depth - 1
        break
      if depth == depths[0] and secs > 3 * best_s:
        return table, frontier
      if row["recall"] - last < 0.001:
        break
      last = row["recall"]
    before = seen.get((previous_leaves, depth))
    stale = stale + 1 if before is not None and row["recall"] - before < 0.001 else 0
    if stale >= 2:
      break
    previous_leaves = leaves
  return table, frontier


def choose(index, queries: np.ndarray, k: int, frontier: Sequence[dict], repeats: int = 3) -> dict:
  """The fastest frontier setting, timed best-of-`repeats` in alternating rounds."""
  best = {id(r): math.inf for r in frontier}
  for _ in range(repeats):
    for r in frontier:
      _, secs = _timed_search(index, queries, k, r["leaves_to_search"], r["reorder"])
      best[id(r)] = min(best[id(r)], secs)
  pick = min(frontier, key=lambda r: (best[id(r)], r["leaves_to_search"], r["reorder"]))
  return {**pick, "seconds": best[id(pick)], "qps": round(len(queries) / best[id(pick)], 1)}


def tune(index, queries: np.ndarray, truth: np.ndarray, *, k: int = 10, target: float = 0.95,
         holdout: float = 0.5, seed: int = 0, repeats: int = 3, z: float = Z_95,
         max_reorder: int = 1600) -> dict:
  """Sweeps on the tuning part of `queries` (vectors; `truth` = exact top-k rows), picks the
  fastest setting meeting `target`, checks it on the held-out part.  Raises `ValueError` when
  no setting meets the target."""
  if len(queries) < 2:
    raise ValueError(f"need at least 2 queries to tune, got {len(queries)}")
  tune_rows, held_rows = split(len(queries), holdout, seed)
  table, frontier = sweep(index, queries[tune_rows], truth[tune_rows], k, target, z, max_reorder)
  if not frontier:
    top = max(table, key=lambda r: r["lower_bound"])
    raise ValueError(f"no setting reaches recall@{k} {target} (lower bound) on {len(tune_rows)} "
                     f"tuning queries; the best was {top['recall']} (lower bound {top['lower_bound']}) "
                     f"at {top['leaves_to_search']} leaves, depth {top['reorder']}: lower --target, "
                     f"raise --max-reorder, or rebuild with more leaves / less quantization")
  pick = choose(index, queries[tune_rows], k, frontier, repeats)
  result = {"leaves_to_search": pick["leaves_to_search"], "reorder": pick["reorder"], "k": k,
            "target": target, "num_leaves": index.num_leaves, "recall_tune": pick["recall"],
            "lower_bound_tune": pick["lower_bound"], "n_tune": int(len(tune_rows)),
            "qps_tune": pick["qps"]}
  if len(held_rows):
    rows, _ = index.search(queries[held_rows], k, leaves_to_search=pick["leaves_to_search"],
                           reorder=pick["reorder"])
    rec = per_query_recall(rows, truth[held_rows])
    result.update({"recall_heldout": round(float(rec.mean()), 4),
                   "lower_bound_heldout": round(lower_bound(rec, z), 4),
                   "n_heldout": int(len(held_rows))})
  result["sweep"] = [{**r, "seconds": round(r["seconds"], 4)} for r in table]
  return result


def exact_truth(embeddings_dir: str, queries: np.ndarray, k: int) -> np.ndarray:
  """Exact top-k rows of `queries`, streaming the tensorstore embeddings (bounded memory)."""
  from ragjax.retrieval import embed_store
  from ragjax.retrieval.exact import search_chunks
  rows, _ = search_chunks(embed_store.iter_chunks(embeddings_dir), queries, k)
  return rows


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--index", required=True, help="a ScaNN index directory (ragjax.retrieval.build)")
  ap.add_argument("--queries", required=True, help="question file or .txt, one query per line")
  ap.add_argument("--target", type=float_range(0.0, 1.0), default=0.95,
                  help="recall@k against exact search to meet (lower confidence bound)")
  ap.add_argument("--k", type=positive_int, default=10)
  ap.add_argument("--holdout", type=float_range(0.0, 0.9), default=0.5,
                  help="fraction of the queries kept out of the sweep to check the choice")
  ap.add_argument("--limit", type=positive_int, default=None, help="first N queries only")
  ap.add_argument("--repeats", type=positive_int, default=3, help="timing rounds (best of)")
  ap.add_argument("--max-reorder", type=positive_int, default=1600, help="deepest re-scoring tried")
  ap.add_argument("--seed", type=int, default=0, help="tuning / held-out split")
  ap.add_argument("--dry-run", action="store_true", help="print the choice, do not write it")
  ap.add_argument("--allow-pickle", action="store_true",
                  help="open an index directory that holds a pickle (it can run code; trusted indexes only)")
  args = ap.parse_args(argv)
  if not os.path.exists(args.queries):
    ap.error(f"--queries file not found: {args.queries}")
  from ragjax.retrieval.index import EncoderSpec, QUERY_BATCH_SIZE, read_meta, write_meta
  from ragjax.retrieval.scann_index import ScannIndex
  from ragjax.retrieval.trust import refuse_pickles
  try:
    meta = read_meta(args.index)
    refuse_pickles(args.index, args.allow_pickle)
    if meta["backend"] != "scann":
      raise ValueError(f"{args.index} is a {meta['backend']} index; only ScaNN has settings to tune")
    texts = read_queries(args.queries, args.limit)
    if len(texts) < 2:
      raise ValueError(f"{args.queries}: {len(texts)} usable queries; need at least 2")
    index = ScannIndex.load(os.path.join(args.index, "scann"), allow_pickle=args.allow_pickle)
  except (OSError, ValueError) as e:
    ap.error(str(e))
  t0 = time.time()
  encoder = EncoderSpec(**meta["encoder"]).load(batch_size=QUERY_BATCH_SIZE)
  queries = encoder.encode(texts, kind="query")
  truth = exact_truth(os.path.join(args.index, "embeddings"), queries, args.k)
  try:
    result = tune(index, queries, truth, k=args.k, target=args.target, holdout=args.holdout,
                  seed=args.seed, repeats=args.repeats, max_reorder=args.max_reorder)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"{'leaves':>7} {'depth':>6} {'recall@%d' % args.k:>10} {'lower bd':>9} {'seconds':>8}")
  for r in result["sweep"]:
    print(f"{r['leaves_to_search']:>7} {r['reorder']:>6} {r['recall']:>10.4f} {r['lower_bound']:>9.4f} "
          f"{r['seconds']:>8.4f}")
  record = {k: v for k, v in result.items() if k != "sweep"}
  record.update({"queries": os.path.abspath(args.queries), "n_queries": len(texts),
                 "date": datetime.date.today().isoformat()})
  held = record.get("recall_heldout")
  if held is not None and held < args.target:
    print(f"warning: held-out recall@{args.k} {held} is below the target {args.target}; more queries "
          f"would make the choice safer", file=sys.stderr)
  if not args.dry_run:
    meta["search"] = {"leaves_to_search": result["leaves_to_search"], "reorder": result["reorder"],
                      "tuned": record}
    write_meta(args.index, meta)
  print(f"chose {result['leaves_to_search']} of {index.num_leaves} leaves, depth {result['reorder']}: "
        f"recall@{args.k} {record['recall_tune']} (tuning), {held} (held-out); "
        f"{'not written (--dry-run)' if args.dry_run else 'written to ' + os.path.join(args.index, 'index.json')}")
  print(json.dumps({**record, "written": not args.dry_run, "seconds": round(time.time() - t0, 1)}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
