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
  if index or url:
    index, url = index or "", url or ""
  else:
    index, url = r.index, r.url
  check_retriever(index, url, timeout=r.timeout)


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
