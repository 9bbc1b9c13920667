"""Passage embeddings in a chunked tensorstore (zarr) array, written so a killed build resumes,
optionally by several processes at once.

Rows are encoded and written one chunk (`chunk_rows` rows) at a time; a chunk counts as done
once its write has committed and a progress file says so (written atomically via rename).  A
restarted build reopens the array, checks that the fingerprint (encoder + corpus) matches, and
encodes only the chunks not yet done.  A chunk that was being written when a process died is
simply written again: chunk writes are idempotent, and the encoder's output for a text does not
depend on its batch, so a resumed build is bit-identical to an uninterrupted one.

Progress: `progress.json` holds the array's shape, the fingerprint, `done_rows` and the done
chunks (as [start, stop) intervals).  One process updates it after every chunk.  With P
processes (`process_count`, e.g. one per host under `jax.distributed`), process 0 works out the
chunks still to do, every process takes its share of them (`shard_range`) and records its own
progress in `progress.<run>.<p>.json`; at the end process 0 folds those files back into
`progress.json`.  A run killed part-way resumes with any number of processes.

Reading: `open_embeddings` / `read_rows` / `iter_chunks` serve bounded slices (index builds and
exact ground truth stream through them); `load_embeddings` reads the whole matrix.
"""

from __future__ import annotations

import glob
import json
import os
import uuid
from typing import Callable, Iterator, Optional, Sequence

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


def to_intervals(chunks: Sequence[int]) -> list[list[int]]:
  """Sorted chunk numbers as [start, stop) runs: [0, 1, 2, 5] -> [[0, 3], [5, 6]]."""
  out: list[list[int]] = []
  for c in sorted(set(int(c) for c in chunks)):
    if out and out[-1][1] == c:
      out[-1][1] = c + 1
    else:
      out.append([c, c + 1])
  return out


def from_intervals(runs) -> list[int]:
  return [c for a, b in runs for c in range(a, b)]


def _shard_files(directory: str) -> list[str]:
  return sorted(glob.glob(os.path.join(directory, "progress.*.*.json")))


def done_chunks(directory: str, state: dict) -> set[int]:
  """Chunks recorded as written: `progress.json` (its intervals, or the `done_rows` prefix of a
  single-process build) plus every process's own progress file."""
  if "done_chunks" in state:
    done = set(from_intervals(state["done_chunks"]))
  else:
    done = set(range(state["done_rows"] // state["chunk_rows"]))
    if state["done_rows"] == state["n"]:
      done = set(range(-(-state["n"] // state["chunk_rows"])))
  for path in _shard_files(directory):
    with open(path) as f:
      shard = json.load(f)
    done.update(from_intervals(shard["chunks"])[:shard["done"]])
  return done


def _rows_in(chunks, n: int, chunk_rows: int) -> int:
  return sum(min(n, (c + 1) * chunk_rows) - c * chunk_rows for c in chunks)


def _single_process_gather(obj):
  return [obj]


def build_embeddings(directory: str, n: int, dim: int, texts: Callable[[int, int], Sequence[str]],
                     encode: Callable[[Sequence[str]], np.ndarray], fingerprint: dict,
                     chunk_rows: int = 2048, progress: bool = True,
                     stop_after_chunks: Optional[int] = None, process_index: int = 0,
                     process_count: int = 1,
                     gather: Callable[[object], list] = _single_process_gather) -> int:
  """Encodes rows [0, n) of `texts(start, stop)` into `directory`, resuming if possible.

  Several processes (each calling this with its `process_index` of `process_count` and a
  `gather` that all-gathers a Python object, e.g. `ragjax.parallel.distributed.allgather_objects`)
  split the chunks still to do; the directory must be on a filesystem they all see.
  `stop_after_chunks` ends the call early after that many new chunks (for tests that simulate
  a killed build without killing a process).  Returns the number of chunks this call encoded.
  """
  os.makedirs(directory, exist_ok=True)
  main = process_index == 0
  plan = None
  if main:                       # process 0 alone reads and creates; the others take its plan
    state = read_progress(directory)
    if state is not None:
      if state["fingerprint"] != fingerprint or state["n"] != n or state["dim"] != dim:
        plan = {"error": (
            f"{directory} holds embeddings for a different encoder or corpus "
            f"({state['fingerprint']}, n={state['n']}, dim={state['dim']}); "
            f"this build is ({fingerprint}, n={n}, dim={dim}). Delete it or choose another --out.")}
      else:
        done = done_chunks(directory, state)
        state = {**state, "done_chunks": to_intervals(done),
                 "done_rows": _rows_in(done, n, state["chunk_rows"])}
        _write_json_atomic(os.path.join(directory, PROGRESS), state)
        for path in _shard_files(directory):          # folded into progress.json above
          os.remove(path)
    else:
      ts.open(_spec(directory), create=True, delete_existing=True, dtype=ts.float32, shape=[n, dim],
              chunk_layout=ts.ChunkLayout(chunk_shape=[chunk_rows, dim])).result()
      state = {"fingerprint": fingerprint, "n": n, "dim": dim, "chunk_rows": chunk_rows,
               "done_rows": 0, "done_chunks": []}
      _write_json_atomic(os.path.join(directory, PROGRESS), state)
    if plan is None:
      plan = {"state": state, "run": uuid.uuid4().hex[:8]}
  plan = gather(plan)[0]
  if "error" in plan:
    raise ValueError(plan["error"])
  state, run = plan["state"], plan["run"]
  chunk_rows = state["chunk_rows"]
  arr = ts.open(_spec(directory), open=True).result()
  num_chunks = -(-n // chunk_rows)
  todo = sorted(set(range(num_chunks)) - set(from_intervals(state["done_chunks"])))
  from ragjax.parallel.distributed import shard_range
  lo, hi = shard_range(len(todo), process_index, process_count)
  mine = todo[lo:hi]
  shard_path = os.path.join(directory, f"progress.{run}.{process_index}.json")
  shard = {"chunks": to_intervals(mine), "done": 0, "process": process_index,
           "processes": process_count}
  bar = None
  if progress and main and mine:
    from tqdm import tqdm
    bar = tqdm(total=_rows_in(mine, n, chunk_rows), unit="passage", desc="encode", dynamic_ncols=True)
  for c in mine:
    if stop_after_chunks is not None and shard["done"] >= stop_after_chunks:
      break
    start, stop = c * chunk_rows, min(n, (c + 1) * chunk_rows)
    vecs = np.asarray(encode(texts(start, stop)), np.float32)
    if vecs.shape != (stop - start, dim):
      raise ValueError(f"encoder returned shape {vecs.shape} for rows {start}:{stop}, expected "
                       f"{(stop - start, dim)}")
    arr[start:stop].write(vecs).result()
    shard["done"] += 1
    if process_count == 1:
      runs = state["done_chunks"]
      if runs and runs[-1][1] == c:            # the usual case: extends the last run
        runs = runs[:-1] + [[runs[-1][0], c + 1]]
      else:
        runs = to_intervals(from_intervals(runs) + [c])
      state = {**state, "done_chunks": runs, "done_rows": state["done_rows"] + stop - start}
      _write_json_atomic(os.path.join(directory, PROGRESS), state)
    else:
      _write_json_atomic(shard_path, shard)
    if bar is not None:
      bar.update(stop - start)
  if bar is not None:
    bar.close()
  gather(shard["done"])          # every process has finished writing
  if main and process_count > 1:
    done = done_chunks(directory, state)
    state = {**state, "done_chunks": to_intervals(done), "done_rows": _rows_in(done, n, chunk_rows)}
    _write_json_atomic(os.path.join(directory, PROGRESS), state)
    for path in _shard_files(directory):
      os.remove(path)
  return shard["done"]


def open_embeddings(directory: str) -> ts.TensorStore:
  """The finished [N, D] array (not read); refuses a partial build with a clear message."""
  state = read_progress(directory)
  if state is None:
    raise FileNotFoundError(f"no embeddings at {directory} (missing {PROGRESS})")
  if state["done_rows"] != state["n"]:
    raise ValueError(f"embeddings at {directory} are incomplete ({state['done_rows']}/{state['n']} "
                     f"rows); rerun the build to resume")
  return ts.open(_spec(directory), open=True).result()


def read_rows(arr: ts.TensorStore, start: int, stop: int) -> np.ndarray:
  return np.asarray(arr[start:stop].read().result(), np.float32)


def iter_chunks(directory: str, rows: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
  """(start, [m, D] float32) slices of the finished array, `rows` at a time."""
  arr = open_embeddings(directory)
  n = arr.shape[0]
  for a in range(0, n, rows):
    yield a, read_rows(arr, a, min(n, a + rows))


def load_embeddings(directory: str) -> np.ndarray:
  """The finished [N, D] float32 matrix (small corpora; large ones stream via `iter_chunks`)."""
  arr = open_embeddings(directory)
  return read_rows(arr, 0, arr.shape[0])
