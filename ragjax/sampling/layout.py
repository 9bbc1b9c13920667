"""Where the sampler's arrays live on a mesh: batch over (data, fsdp), KV heads over tensor.

Specs come from the logical-axis rules in `ragjax.parallel.mesh`; dims the mesh does not
divide stay replicated.  Constraints are applied inside the jitted functions from the traced
shapes, so one helper serves every batch size and bucket.
"""

from __future__ import annotations

from typing import Optional

import jax
from jax.sharding import Mesh, NamedSharding

from ragjax.models import cpu_attention, kv_cache
from ragjax.parallel.mesh import logical_to_spec
from ragjax.parallel.shard import batch_sharding


def rows_sharding(mesh: Mesh, shape) -> NamedSharding:
  """Rows on axis 0, everything else replicated (full vocab per row for sampling)."""
  return batch_sharding(mesh, len(shape), shape[0])


def cache_sharding(mesh: Mesh, leaf) -> NamedSharding:
  """One cache array's sharding, from its layout's logical axes (see ragjax.models.kv_cache)."""
  return NamedSharding(mesh, logical_to_spec(kv_cache.logical_axes(leaf), leaf.shape, mesh))


def constrain_state(state, mesh: Optional[Mesh]):
  """Pins a SamplerState's arrays to their shardings (no-op without a mesh)."""
  if mesh is None:
    return state
  wsc = jax.lax.with_sharding_constraint
  cache = constrain_cache(state.cache, mesh)
  rest = {f: wsc(getattr(state, f), rows_sharding(mesh, getattr(state, f).shape))
          for f in ("tokens", "lengths", "logits", "finished", "stop_state", "keys",
                    "temperature", "turn_tokens")}
  return state.replace(cache=cache, **rest)


def attention_rows(mesh: Optional[Mesh]) -> int:
  """Rows per chunk of a prefill's or extend's attention: one at a time on an unsharded CPU
  (one row's score tensor stays in the caches: 2.5x faster for an extend of 32 x 384 tokens
  into 2,048 slots), all at once under a mesh (a chunk loop over a sharded batch would move
  rows between devices) and on accelerators."""
  return 1 if mesh is None and jax.default_backend() == "cpu" else 0


def cpu_kernel(mesh: Optional[Mesh], wanted: bool = True) -> bool:
  """Whether cached attention runs in `ragjax.models.cpu_attention`'s kernel: on an unsharded
  CPU when the config asks for it and the kernel builds (a decode step's attention read up to
  each row's length; see the kernel's module).  Under a mesh the batch is sharded and XLA
  must see the attention, so it stays XLA's there, as on accelerators."""
  return bool(wanted and mesh is None and jax.default_backend() == "cpu"
              and cpu_attention.available())


def fused_projections(mesh: Optional[Mesh], num_kv_heads: int,
                      wanted: Optional[bool] = None) -> bool:
  """Whether the sampler runs on the fused-projection layout (see SamplerConfig): `wanted`,
  or when None, on accelerators unless the mesh's tensor axis does not divide the KV heads
  (the fused kernel, grouped by KV head, would then stay whole on every device)."""
  if wanted is not None:
    return bool(wanted)
  tensor = 1 if mesh is None else mesh.shape.get("tensor", 1)
  return jax.default_backend() != "cpu" and num_kv_heads % tensor == 0


def constrain_rows(x, mesh: Optional[Mesh]):
  return x if mesh is None else jax.lax.with_sharding_constraint(x, rows_sharding(mesh, x.shape))


def constrain_cache(cache, mesh: Optional[Mesh]):
  if mesh is None:
    return cache
  return jax.tree.map(
      lambda x: jax.lax.with_sharding_constraint(x, cache_sharding(mesh, x)), cache)
