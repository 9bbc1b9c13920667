"""Content fingerprints of what an evaluation reads: the checkpoint, the index, the data files.

    file_digest(path)                -> {"bytes": n, "sha256": hex, "hashed": "all" | "sampled"}
    checkpoint_fingerprint(ckpt_dir) -> {"files": {name: file_digest}, "sha256": hex}
    index_fingerprint(index_dir)     -> {"files": {...}, "sha256": hex}

`run.json` keeps these so a resumed run refuses weights or an index replaced at the same path
(`ragjax.eval.run_record`).  What each covers:

* A file of at most `FULL_HASH_BYTES` (64 MiB) is hashed whole (SHA-256 of its bytes).  A
  larger one is hashed by sampling: SHA-256 over its size and `SAMPLES` (32) blocks of 1 MiB
  spread evenly from its first byte to its last (the first block holds a safetensors header),
  so a changed weight outside the sampled blocks goes unnoticed; retrained or other weights
  change every block.  `hashed` says which.
* Checkpoint: every top-level weight, config and tokenizer file (`*.safetensors`, `*.json`,
  `*.txt`, `*.model`, `*.tiktoken`), by the rule above; nothing else in the directory.
* Index: every file under the directory by name and size; its metadata (files up to 1 MiB:
  `index.json`, `ingest.json`, the corpus stamp, ...) and its passage store
  (`passages.arrow`) by content.  The embeddings, ScaNN and BM25 structures are derived from
  those and counted by size only (hashing a wiki-scale index would take minutes).
"""

from __future__ import annotations

import hashlib
import os

FULL_HASH_BYTES = 64 << 20
SAMPLES = 32
BLOCK = 1 << 20
CHECKPOINT_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".tiktoken")
INDEX_CONTENT_FILES = ("passages.arrow",)
INDEX_SMALL_BYTES = 1 << 20


def file_digest(path: str, full_up_to: int = FULL_HASH_BYTES) -> dict:
  """{"bytes", "sha256", "hashed"} of one file (whole up to `full_up_to` bytes, else sampled)."""
  size = os.path.getsize(path)
  h = hashlib.sha256()
  with open(path, "rb") as f:
    if size <= full_up_to:
      for block in iter(lambda: f.read(BLOCK), b""):
        h.update(block)
      return {"bytes": size, "sha256": h.hexdigest(), "hashed": "all"}
    h.update(str(size).encode())
    last = size - BLOCK
    for i in range(SAMPLES):
      f.seek(last * i // (SAMPLES - 1))
      h.update(f.read(BLOCK))
  return {"bytes": size, "sha256": h.hexdigest(), "hashed": f"sampled {SAMPLES} x 1 MiB"}


def _combined(files: dict) -> str:
  h = hashlib.sha256()
  for name in sorted(files):
    d = files[name]
    h.update(f"{name}\0{d['bytes']}\0{d.get('sha256', '')}\n".encode())
  return h.hexdigest()


def checkpoint_fingerprint(directory: str) -> dict:
  """The weight, config and tokenizer files of an HF checkpoint directory (see the module
  docstring); a directory with no `*.safetensors` is refused, naming it."""
  if not os.path.isdir(directory):
    raise NotADirectoryError(f"checkpoint {directory!r} is not a directory")
  names = sorted(n for n in os.listdir(directory)
                 if n.endswith(CHECKPOINT_SUFFIXES) and os.path.isfile(os.path.join(directory, n)))
  if not any(n.endswith(".safetensors") for n in names):
    raise FileNotFoundError(f"checkpoint {directory!r} holds no *.safetensors weights")
  files = {n: file_digest(os.path.join(directory, n)) for n in names}
  return {"files": files, "sha256": _combined(files)}


def index_fingerprint(directory: str) -> dict:
  """Every file of an index directory by size; metadata and passages by content."""
  if not os.path.isdir(directory):
    raise NotADirectoryError(f"index {directory!r} is not a directory")
  files = {}
  for base, dirs, names in os.walk(directory):
    dirs.sort()
    for n in sorted(names):
      path = os.path.join(base, n)
      rel = os.path.relpath(path, directory)
      if n.endswith(".tmp") or not os.path.isfile(path):
        continue
      size = os.path.getsize(path)
      if size <= INDEX_SMALL_BYTES or n in INDEX_CONTENT_FILES:
        files[rel] = file_digest(path)
      else:
        files[rel] = {"bytes": size}
  return {"files": files, "sha256": _combined(files)}
