"""Placing param trees and batches on a mesh from their logical axis names."""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ragjax.parallel.mesh import logical_to_spec

BATCH_AXES = ("data", "fsdp")


def param_shardings(logical_axes: Any, abstract: Any, mesh: Mesh) -> Any:
  """Tree of NamedShardings from a tree of logical PartitionSpecs and matching shapes."""
  return jax.tree.map(
      lambda spec, leaf: NamedSharding(mesh, logical_to_spec(tuple(spec), leaf.shape, mesh)),
      logical_axes, abstract, is_leaf=lambda x: isinstance(x, P))


def shard_params(params: Any, shardings: Any) -> Any:
  return jax.device_put(params, shardings)


def batch_sharding(mesh: Mesh, ndim: int, batch_size: int | None = None) -> NamedSharding:
  """Leading dim over (data, fsdp); the rest replicated.  Falls back when B doesn't divide."""
  if batch_size is None:
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))
  spec = logical_to_spec(("batch",) + (None,) * (ndim - 1), (batch_size,) + (1,) * (ndim - 1), mesh)
  return NamedSharding(mesh, spec)


def shard_batch(batch: Any, mesh: Mesh) -> Any:
  """device_put every array leaf with its leading dim split over the batch axes."""
  return jax.tree.map(lambda x: jax.device_put(x, batch_sharding(mesh, x.ndim, x.shape[0])), batch)
