"""Checks of what a run reads, made before its first expensive step (no JAX, no data, no
model): the workdir, the seed, the `eval` section's sizes, the retriever's index or server.
Each refusal is one user error naming the field (see `ragjax.errors`)."""

from __future__ import annotations

import os
from typing import Optional


def check_run_inputs(c, *, index: Optional[str] = None, url: Optional[str] = None) -> None:
  """What every command that runs a config reads, checked before its first expensive step:
  the workdir, the seed, the `eval` section's sizes and the retriever (`index` / `url`:
  evaluate's overrides of the config's)."""
  check_workdir(c.workdir)
  check_seed(c.seed)
  check_eval_section(c.eval)
  r = c.retriever
  check_retriever_numbers(r)
  if index or url:
    index, url = index or "", url or ""
  else:
    index, url = r.index, r.url
  check_retriever(index, url, timeout=r.timeout)


def check_retriever_numbers(r) -> None:
  """`retriever.timeout` and `retriever.deadline` > 0 (seconds), `retriever.cache_size` >= 0."""
  for name, strict in (("timeout", True), ("deadline", True), ("cache_size", False)):
    v = r.get(name, 1)
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
          and (v > 0 if strict else v >= 0) and v != float("inf"))
    if not ok:
      raise ValueError(f"retriever.{name} must be a finite number {'>' if strict else '>='} 0, "
                       f"got {v!r}")


def check_workdir(workdir) -> None:
  """`workdir` is a non-empty path whose nearest existing part is a directory this process can
  write in (a read-only filesystem or directory is refused before any work)."""
  if not isinstance(workdir, str) or not workdir.strip():
    raise ValueError(f"workdir must be a directory path, got {workdir!r} (an empty workdir "
                     f"would write into the current directory)")
  path = os.path.abspath(workdir)
  while not os.path.exists(path):
    path = os.path.dirname(path)
  if not os.path.isdir(path):
    raise NotADirectoryError(f"workdir {os.path.abspath(workdir)}: {path} is a file, not a "
                             f"directory")
  if not os.access(path, os.W_OK | os.X_OK):
    raise PermissionError(f"workdir {os.path.abspath(workdir)}: {path} is not writable "
                          f"(a read-only filesystem or directory)")


def check_seed(seed) -> None:
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 31:
    raise ValueError(f"seed must be an integer in [0, 2**31), got {seed!r}")


def check_eval_section(e) -> None:
  """`eval.batch_size` >= 1; `eval.max_questions`, `eval.top_k` >= 0 (0: all / the
  protocol's)."""
  for name, low in (("batch_size", 1), ("max_questions", 0), ("top_k", 0)):
    v = e.get(name, low)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
      raise ValueError(f"eval.{name} must be an integer >= {low}, got {v!r}")


def check_retriever(index: str, url: str, timeout: float = 30.0) -> None:
  """`retriever.index`: an index directory (its index.json names a known backend);
  `retriever.url`: a server that answers at all now (a dead URL is said at once; the
  retries up to `retriever.deadline` are for an outage mid-run)."""
  if index and not url:
    from ragjax.retrieval.index import read_meta
    try:
      read_meta(index)
    except FileNotFoundError as e:
      raise FileNotFoundError(f"retriever.index: {e}") from None
  if url:
    from ragjax.retrieval.client import check_reachable
    check_reachable(url, timeout=min(float(timeout), 10.0))


def check_world(c) -> None:
  """With `data.source='world'`: the `world` section (every field's range) and the tokenizer
  trained on it, before the world is generated and written: questions to train on, and a
  `tokenizer.vocab_size` that holds the special, byte and protocol tokens."""
  if c.data.source != "world":
    return
  from ragjax.data.tokenizer import PROTOCOL_TAGS, min_vocab_size
  from ragjax.data.world import WorldConfig
  from ragjax.typed_config import from_dict
  world = from_dict(WorldConfig, c.world, "world")
  if world.num_train < 1:
    raise ValueError(f"world.num_train must be >= 1 for training, got {world.num_train} (the "
                     f"training set would be empty)")
  t = c.tokenizer
  need = min_vocab_size(PROTOCOL_TAGS + tuple(t.get("extra_tags", ())))
  if isinstance(t.vocab_size, bool) or not isinstance(t.vocab_size, int) or t.vocab_size < need:
    raise ValueError(f"tokenizer.vocab_size must be an integer >= {need} (the special, byte and "
                     f"protocol tokens), got {t.vocab_size!r}")


def check_data_files(c, question_files: bool = True) -> None:
  """`retriever.corpus` (when set and indexed here) is a file with a usable passage; with
  `data.source='files'` every `data.split.files` entry and (`question_files`) every
  `data.{train,dev,test}_files` entry is a file."""
  corpus = c.retriever.get("corpus", "") if "retriever" in c else ""
  if corpus and not os.path.isfile(corpus):
    raise FileNotFoundError(f"retriever.corpus: {corpus!r} is not a file")
  if corpus and not c.retriever.get("index") and not c.retriever.get("url"):
    from ragjax.retrieval.index import check_corpus
    try:
      check_corpus(corpus)         # up to its first usable passage
    except ValueError as e:
      raise ValueError(f"retriever.corpus: {e}") from None
  if c.data.source != "files":
    return
  split = c.data.get("split") or {}
  for field in ("train_files", "dev_files", "test_files", "split.files")[
      0 if question_files else 3:]:
    paths = split.get("files", ()) if field == "split.files" else c.data.get(field, ())
    for path in paths or ():
      if not isinstance(path, str) or not os.path.isfile(path):
        raise FileNotFoundError(f"data.{field}: {path!r} is not a file")


def check_mesh(section) -> None:
  """Each of `mesh.data`, `mesh.fsdp`, `mesh.tensor` a positive size or -1 (at most one -1);
  whether the devices fit is known once the backend is up."""
  sizes = {}
  for axis in ("data", "fsdp", "tensor"):
    v = section.get(axis, 1)
    if isinstance(v, bool) or not isinstance(v, int) or v == 0 or v < -1:
      raise ValueError(f"mesh.{axis} must be a positive size or -1, got {v!r}")
    sizes[axis] = v
  if list(sizes.values()).count(-1) > 1:
    raise ValueError(f"mesh: at most one axis may be -1, got {sizes}")
