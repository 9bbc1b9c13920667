"""Mesh, logical-axis rules and helpers that place params and batches on devices."""

from ragjax.parallel.mesh import (LOGICAL_RULES, MESH_AXES, logical_sharding, logical_to_spec,
                                  make_mesh, mesh_from_config, replicated)
from ragjax.parallel.shard import (batch_sharding, param_shardings, shard_batch, shard_params)

__all__ = ["LOGICAL_RULES", "MESH_AXES", "make_mesh", "mesh_from_config", "logical_to_spec", "logical_sharding",
           "replicated", "param_shardings", "shard_params", "batch_sharding", "shard_batch"]
