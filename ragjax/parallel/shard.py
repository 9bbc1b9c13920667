"""Placing param trees and batches on a mesh from their logical axis names."""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ragjax.parallel.mesh import logical_to_spec, mesh_axes_of


def param_shardings(logical_axes: Any, abstract: Any, mesh: Mesh) -> Any:
  """Tree of NamedShardings from a tree of logical PartitionSpecs and matching shapes."""
  return jax.tree.map(
      lambda spec, leaf: NamedSharding(mesh, logical_to_spec(tuple(spec), leaf.shape, mesh)),
      logical_axes, abstract, is_leaf=lambda x: isinstance(x, P))


def shard_params(params: Any, shardings: Any) -> Any:
  return jax.device_put(params, shardings)


def batch_axes() -> tuple[str, ...]:
  """The mesh axes a batch dimension is split over (the rules table's `batch` entry)."""
  rule = mesh_axes_of("batch")
  return (rule,) if isinstance(rule, str) else tuple(rule or ())


def batch_axis_size(mesh: Mesh) -> int:
  """How many ways the mesh splits a batch: a batch size should be a multiple of it."""
  return math.prod(mesh.shape[a] for a in batch_axes())


def batch_sharding(mesh: Mesh, ndim: int, batch_size: int | None = None) -> NamedSharding:
  """Leading dim over the batch axes; the rest replicated.  With `batch_size`, a size the
  mesh does not divide falls back to the axes that do (or replication)."""
  if batch_size is None:
    return NamedSharding(mesh, P(batch_axes(), *([None] * (ndim - 1))))
  spec = logical_to_spec(("batch",) + (None,) * (ndim - 1), (batch_size,) + (1,) * (ndim - 1), mesh)
  return NamedSharding(mesh, spec)


def shard_batch(batch: Any, mesh: Mesh) -> Any:
  """device_put every array leaf with its leading dim split over the batch axes."""
  return jax.tree.map(lambda x: jax.device_put(x, batch_sharding(mesh, x.ndim, x.shape[0])), batch)
