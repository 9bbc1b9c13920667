"""Exact maximum-inner-product search: blocked matmul + running top-k in JAX.

The database is scanned in fixed-size blocks so a query batch never materialises a [Q, N]
score matrix (1M rows x 256 queries would be 1 GB); each block's top-k is merged into a
running top-k.  With a mesh, database rows are split over the mesh's batch axes with
`shard_map`: every device scans its own rows and the per-device top-k lists are merged on the
host side of the jit, so a 21M-row index can be spread over many accelerators.
`search_chunks` gives the same answer for a matrix too large for memory, streamed in slices.
"""

from __future__ import annotations

import functools
from typing import Iterable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ragjax.parallel.mesh import logical_to_spec


def _scan_topk(q, db, ids, k: int, block: int):
  """q [Q, D], db [N, D] (N a multiple of block), ids [N] (-1 = padding) -> (scores, ids) [Q, k]."""
  nq = q.shape[0]
  nb = db.shape[0] // block
  db = db.reshape(nb, block, db.shape[1])
  ids = ids.reshape(nb, block)
  kk = min(k, block)

  def step(carry, xs):
    best_s, best_i = carry
    blk, blk_ids = xs
    s = jnp.einsum("qd,bd->qb", q, blk.astype(q.dtype), preferred_element_type=jnp.float32)
    s = jnp.where(blk_ids[None, :] >= 0, s, -jnp.inf)
    ls, li = jax.lax.top_k(s, kk)
    cat_s = jnp.concatenate([best_s, ls], axis=1)
    cat_i = jnp.concatenate([best_i, blk_ids[li]], axis=1)
    ts, ti = jax.lax.top_k(cat_s, k)
    return (ts, jnp.take_along_axis(cat_i, ti, axis=1)), None

  init = (jnp.full((nq, k), -jnp.inf, jnp.float32), jnp.full((nq, k), -1, jnp.int32))
  (s, i), _ = jax.lax.scan(step, init, (db, ids))
  return s, i


@functools.lru_cache(maxsize=None)
def _single_device_fn(k: int, block: int):
  """One compiled search per (k, block) shared by every index (the chunks of `search_chunks`)."""
  return jax.jit(functools.partial(_scan_topk, k=k, block=block))


class ExactIndex:
  """Brute-force inner-product top-k over `vectors` [N, D] (normalise them for cosine)."""

  def __init__(self, vectors: np.ndarray, *, block: int = 16384, mesh: Optional[Mesh] = None,
               dtype=jnp.float32):
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] == 0:
      raise ValueError(f"vectors must be a non-empty [N, D] matrix, got shape {vectors.shape}")
    self.n, self.dim = vectors.shape
    self.mesh = mesh
    shards = 1
    if mesh is not None:
      # Database rows play the role of the batch axis (the rules table maps it to data x fsdp);
      # the probe shape is divisible by every mesh axis so the spec names all of them.
      axes = logical_to_spec(("batch", None), (mesh.devices.size, self.dim), mesh)[0]
      axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
      shards = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
      self._axes = axes
    per_shard = -(-self.n // shards)
    self.block = int(min(block, max(per_shard, 1)))
    per_shard = -(-per_shard // self.block) * self.block
    total = per_shard * shards
    db = np.zeros((total, self.dim), np.dtype(dtype))
    db[:self.n] = vectors
    ids = np.full((total,), -1, np.int32)
    ids[:self.n] = np.arange(self.n, dtype=np.int32)
    if mesh is not None and shards > 1:
      row = NamedSharding(mesh, P(self._axes, None))
      self._db = jax.device_put(db, row)
      self._ids = jax.device_put(ids, NamedSharding(mesh, P(self._axes)))
    else:
      self._db, self._ids = jnp.asarray(db), jnp.asarray(ids)
      shards = 1
    self.shards = shards
    self._fns: dict[int, callable] = {}

  def _fn(self, k: int):
    if k in self._fns:
      return self._fns[k]
    scan = functools.partial(_scan_topk, k=k, block=self.block)
    if self.shards == 1:
      fn = _single_device_fn(k, self.block)
    else:
      local = jax.shard_map(scan, mesh=self.mesh,
                            in_specs=(P(), P(self._axes, None), P(self._axes)),
                            out_specs=(P(None, self._axes), P(None, self._axes)),
                            check_vma=False)   # scan carry starts replicated, ends per-shard

      def merged(q, db, ids):
        s, i = local(q, db, ids)              # [Q, shards * k]
        ts, ti = jax.lax.top_k(s, k)
        return ts, jnp.take_along_axis(i, ti, axis=1)
      fn = jax.jit(merged)
    self._fns[k] = fn
    return fn

  def search(self, queries: np.ndarray, k: int, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """queries [Q, D] -> (rows [Q, k] int64, -1 past the end; scores [Q, k] float32).

    Queries go through in blocks of exactly `batch` rows (the last zero-padded): one compiled
    program per k, and a query's scores do not depend on how many queries came with it (XLA's
    matmul output for a row moves with the row count, up to 5e-5 for a single row on CPU).
    """
    queries = np.asarray(queries, np.float32)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f"queries must be [Q, {self.dim}], got shape {queries.shape}")
    fn = self._fn(int(k))
    rows, scores = [], []
    for s in range(0, queries.shape[0], batch):
      q = queries[s:s + batch]
      pad = batch - q.shape[0]
      if pad:
        q = np.concatenate([q, np.zeros((pad, self.dim), np.float32)])
      sc, ix = fn(jnp.asarray(q), self._db, self._ids)
      n = q.shape[0] - pad
      rows.append(np.asarray(ix)[:n].astype(np.int64))
      scores.append(np.asarray(sc)[:n])
    if not rows:
      return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    return np.concatenate(rows), np.concatenate(scores)


def search_chunks(chunks: Iterable[tuple[int, np.ndarray]], queries: np.ndarray, k: int, *,
                  block: int = 16384, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
  """Exact top-k over a matrix that arrives as row slices `(start, [m, D])` (e.g.
  `embed_store.iter_chunks` of a corpus too large for memory): each slice is searched with
  `ExactIndex` and the lists merged, ties broken by row.  Same result as one `ExactIndex`
  over the whole matrix, holding one slice at a time."""
  queries = np.asarray(queries, np.float32)
  rows = np.full((queries.shape[0], k), -1, np.int64)
  scores = np.full((queries.shape[0], k), -np.inf, np.float32)
  for start, part in chunks:
    r, s = ExactIndex(part, block=block).search(queries, k, batch=batch)
    r = np.where(r >= 0, r + start, -1)
    cat_r, cat_s = np.concatenate([rows, r], 1), np.concatenate([scores, s], 1)
    tie = np.where(cat_r >= 0, cat_r, np.iinfo(np.int64).max)
    order = np.lexsort((tie, -cat_s), axis=-1)[:, :k]
    rows, scores = np.take_along_axis(cat_r, order, 1), np.take_along_axis(cat_s, order, 1)
  return rows, scores
