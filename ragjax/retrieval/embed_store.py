"""Passage embeddings in a chunked tensorstore (zarr) array, written so a killed build resumes.

Rows are encoded and written one chunk at a time; after each chunk's write has committed,
`progress.json` records how many rows are done (written atomically via rename).  A restarted
build reopens the array, checks that the fingerprint (encoder + corpus) matches, and starts at
the first unfinished chunk.  A chunk that was being written when the process died is simply
written again: chunk writes are idempotent.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Optional, Sequence

import numpy as np
import tensorstore as ts

ARRAY_DIR = "embeddings.zarr"
PROGRESS = "progress.json"


def _spec(directory: str) -> dict:
  return {"driver": "zarr", "kvstore": {"driver": "file", "path": os.path.join(directory, ARRAY_DIR)}}


def _write_json_atomic(path: str, obj: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def read_progress(directory: str) -> Optional[dict]:
  path = os.path.join(directory, PROGRESS)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def build_embeddings(directory: str, n: int, dim: int, texts: Callable[[int, int], Sequence[str]],
                     encode: Callable[[Sequence[str]], np.ndarray], fingerprint: dict,
                     chunk_rows: int = 2048, progress: bool = True,
                     stop_after_chunks: Optional[int] = None) -> ts.TensorStore:
  """Encodes rows [0, n) of `texts(start, stop)` into `directory`, resuming if possible.

  `stop_after_chunks` ends the call early after that many new chunks (for tests that simulate
  a killed build without killing a process).
  """
  os.makedirs(directory, exist_ok=True)
  state = read_progress(directory)
  if state is not None:
    if state["fingerprint"] != fingerprint or state["n"] != n or state["dim"] != dim:
      raise ValueError(
          f"{directory} holds embeddings for a different encoder or corpus "
          f"({state['fingerprint']}, n={state['n']}, dim={state['dim']}); "
          f"this build is ({fingerprint}, n={n}, dim={dim}). Delete it or choose another --out.")
    chunk_rows = state["chunk_rows"]
    arr = ts.open(_spec(directory), open=True).result()
    done = state["done_rows"]
  else:
    arr = ts.open(_spec(directory), create=True, delete_existing=True, dtype=ts.float32,
                  shape=[n, dim], chunk_layout=ts.ChunkLayout(chunk_shape=[chunk_rows, dim])).result()
    done = 0
    state = {"fingerprint": fingerprint, "n": n, "dim": dim, "chunk_rows": chunk_rows, "done_rows": 0}
    _write_json_atomic(os.path.join(directory, PROGRESS), state)
  bar = None
  if progress and done < n:
    from tqdm import tqdm
    bar = tqdm(total=n, initial=done, unit="passage", desc="encode", dynamic_ncols=True)
  new_chunks = 0
  while done < n:
    if stop_after_chunks is not None and new_chunks >= stop_after_chunks:
      break
    stop = min(n, done + chunk_rows)
    vecs = np.asarray(encode(texts(done, stop)), np.float32)
    if vecs.shape != (stop - done, dim):
      raise ValueError(f"encoder returned shape {vecs.shape} for rows {done}:{stop}, expected "
                       f"{(stop - done, dim)}")
    arr[done:stop].write(vecs).result()
    done = stop
    state["done_rows"] = done
    _write_json_atomic(os.path.join(directory, PROGRESS), state)
    new_chunks += 1
    if bar is not None:
      bar.update(vecs.shape[0])
  if bar is not None:
    bar.close()
  return arr


def load_embeddings(directory: str) -> np.ndarray:
  """The finished [N, D] float32 matrix; refuses a partial build with a clear message."""
  state = read_progress(directory)
  if state is None:
    raise FileNotFoundError(f"no embeddings at {directory} (missing {PROGRESS})")
  if state["done_rows"] != state["n"]:
    raise ValueError(f"embeddings at {directory} are incomplete ({state['done_rows']}/{state['n']} "
                     f"rows); rerun the build to resume")
  return np.asarray(ts.open(_spec(directory), open=True).result().read().result())
