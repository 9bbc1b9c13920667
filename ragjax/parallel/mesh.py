"""The device mesh and the one table of logical-axis rules.

Every parameter and activation is annotated with logical axis names; `LOGICAL_RULES` maps them
to the mesh axes `data`, `fsdp`, `tensor`.  Nothing else in ragjax names mesh axes.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axis (or tuple of mesh axes, or None for replicated).
LOGICAL_RULES: tuple[tuple[str, object], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("qkv", None),           # a KV head's queries, key and value (the sampler's fused layout)
    ("gate_up", None),       # the MLP's gate and up projections (the same)
    ("layers", None),
    ("norm", None),
    ("length", None),
    ("cache_length", None),
    ("position", None),
    ("type_vocab", None),
    ("value", None),
)


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1,
              devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A (data, fsdp, tensor) mesh; one axis may be -1 to take the remaining devices."""
  devices = list(devices if devices is not None else jax.devices())
  shape = [data, fsdp, tensor]
  if shape.count(-1) > 1:
    raise ValueError(f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}")
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if len(devices) % known:
      raise ValueError(f"{len(devices)} devices do not divide into mesh {shape}")
    shape[shape.index(-1)] = len(devices) // known
  if math.prod(shape) != len(devices):
    raise ValueError(f"mesh {dict(zip(MESH_AXES, shape))} needs {math.prod(shape)} devices, "
                     f"have {len(devices)}")
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def mesh_from_config(section, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The mesh a config's `mesh` section asks for ({data, fsdp, tensor}; one may be -1).

  A mesh of fewer devices than the host has uses the first ones (e.g. `mesh.fsdp=2` on 8
  devices); -1 takes all the devices the other axes leave."""
  devices = list(devices if devices is not None else jax.devices())
  shape = {a: int(section[a]) for a in MESH_AXES}
  for axis, size in shape.items():
    if size == 0 or size < -1:
      raise ValueError(f"mesh.{axis} must be a positive size or -1, got {size}")
  if -1 not in shape.values():
    need = math.prod(shape.values())
    if need > len(devices):
      raise ValueError(f"mesh {shape} needs {need} devices; this host has {len(devices)}")
    devices = devices[:need]
  return make_mesh(**shape, devices=devices)


def mesh_axes_of(name: Optional[str]):
  """The mesh axis (or axes, or None) the rules table maps logical axis `name` to."""
  if name is None:
    return None
  for key, value in LOGICAL_RULES:
    if key == name:
      return value
  raise KeyError(f"logical axis {name!r} has no rule; add it to LOGICAL_RULES")


def logical_to_spec(logical: Sequence[Optional[str]], shape: Sequence[int], mesh: Mesh) -> P:
  """Maps logical axis names to a PartitionSpec, replicating any dim the mesh does not divide.

  The divisibility fallback is what lets KV heads (e.g. 2 in Qwen2.5) stay whole when the
  tensor axis is 4, while query heads are split.
  """
  if len(logical) != len(shape):
    raise ValueError(f"logical axes {tuple(logical)} do not match shape {tuple(shape)}")
  out, used = [], set()
  for name, dim in zip(logical, shape):
    rule = mesh_axes_of(name)
    axes = () if rule is None else ((rule,) if isinstance(rule, str) else tuple(rule))
    axes = tuple(a for a in axes if a not in used and mesh.shape[a] > 1)
    size = math.prod(mesh.shape[a] for a in axes)
    if not axes or dim % size:
      # Try a prefix of the axes that does divide (e.g. batch over data only).
      while axes and dim % math.prod(mesh.shape[a] for a in axes):
        axes = axes[:-1]
    if not axes:
      out.append(None)
      continue
    used.update(axes)
    out.append(axes[0] if len(axes) == 1 else axes)
  return P(*out)


def logical_sharding(logical: Sequence[Optional[str]], shape: Sequence[int], mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(logical, shape, mesh))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
