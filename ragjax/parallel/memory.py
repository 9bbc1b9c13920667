"""Per-device memory of sharded arrays, for dry-run plans on hardware this machine does not have.

A plan needs only shapes, dtypes, logical axes and a mesh *shape*: the same rules table that
places real arrays (`LOGICAL_RULES`, through `logical_to_spec`) says how each array splits, so
the bytes one device holds are its global bytes over the product of the mesh axes that split
it.  `Target` names the accelerators people train on (`h100x8`, `v5p-32`, ...).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from ragjax.parallel.mesh import MESH_AXES, logical_to_spec

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Target:
  """An accelerator slice: how many devices JAX sees and the memory of each."""
  name: str
  devices: int
  device_bytes: float
  kind: str


# name pattern -> (devices from the number, bytes per device, kind)
_TARGETS = (
    (r"h100x(\d+)", lambda n: n, 80 * GB, "NVIDIA H100 80GB"),
    (r"h200x(\d+)", lambda n: n, 141 * GB, "NVIDIA H200"),
    (r"a100x(\d+)", lambda n: n, 80 * GB, "NVIDIA A100 80GB"),
    (r"a800x(\d+)", lambda n: n, 80 * GB, "NVIDIA A800 80GB"),
    (r"v5p-(\d+)", lambda n: n // 2, 95 * GB, "TPU v5p (name counts TensorCores; 2 per chip)"),
    (r"v4-(\d+)", lambda n: n // 2, 32 * GB, "TPU v4 (name counts TensorCores; 2 per chip)"),
    (r"v6e-(\d+)", lambda n: n, 32 * GB, "TPU v6e (Trillium)"),
    (r"v5e-(\d+)", lambda n: n, 16 * GB, "TPU v5e"),
)


def parse_target(name: str) -> Target:
  """`h100x8`, `a100x16`, `v5p-32`, `v6e-8`, ...; an unknown name lists the known forms."""
  for pattern, devices, size, kind in _TARGETS:
    m = re.fullmatch(pattern, name.strip().lower())
    if m and devices(int(m.group(1))) >= 1:
      return Target(name, devices(int(m.group(1))), size, kind)
  forms = ", ".join(p.replace(r"(\d+)", "N") for p, *_ in _TARGETS)
  raise ValueError(f"--target {name!r}: unknown accelerator; use one of {forms}")


@dataclasses.dataclass(frozen=True)
class MeshShape:
  """A mesh's axis sizes without devices (what `logical_to_spec` reads)."""
  shape: Mapping[str, int]

  @classmethod
  def resolve(cls, section: Mapping[str, int], devices: int) -> "MeshShape":
    """The config's `mesh` (one axis may be -1) on `devices` devices."""
    sizes = {a: int(section[a]) for a in MESH_AXES}
    known = math.prod(v for v in sizes.values() if v != -1)
    if list(sizes.values()).count(-1) > 1:
      raise ValueError(f"at most one mesh axis may be -1, got {sizes}")
    for a, v in sizes.items():
      if v == -1:
        if devices % known:
          raise ValueError(f"mesh {sizes} does not divide {devices} devices")
        sizes[a] = devices // known
    if math.prod(sizes.values()) > devices:
      raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices; the target "
                       f"has {devices}")
    return cls(sizes)

  @property
  def size(self) -> int:
    return math.prod(self.shape.values())


def split_factor(spec: P, mesh: MeshShape) -> int:
  """How many ways a PartitionSpec splits its array."""
  n = 1
  for entry in spec:
    for axis in (() if entry is None else (entry,) if isinstance(entry, str) else entry):
      n *= mesh.shape[axis]
  return n


def array_bytes(shape: Sequence[int], dtype) -> int:
  return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def sharded_bytes(shape: Sequence[int], dtype, logical: Sequence, mesh: MeshShape) -> float:
  """Bytes one device holds of a [shape] array with these logical axes."""
  spec = logical_to_spec(tuple(logical), tuple(shape), mesh)
  return array_bytes(shape, dtype) / split_factor(spec, mesh)


def tree_bytes(abstract: Any, logical_axes: Any, mesh: MeshShape, dtype=None) -> float:
  """Per-device bytes of a param tree (`abstract`: ShapeDtypeStructs; `logical_axes`: the
  matching tree of logical PartitionSpecs); `dtype` overrides the leaves' own."""
  specs = jax.tree.leaves(logical_axes, is_leaf=lambda x: isinstance(x, P))
  leaves = jax.tree.leaves(abstract)
  if len(specs) != len(leaves):
    raise ValueError(f"{len(specs)} logical specs for {len(leaves)} arrays")
  return float(sum(sharded_bytes(l.shape, dtype or l.dtype, tuple(s), mesh)
                   for l, s in zip(leaves, specs)))


def layer_activation_bytes(rows: int, length: int, hidden: int, intermediate: int, heads: int,
                           tensor: int, act_bytes: int) -> float:
  """One decoder layer in flight over `rows` x `length` tokens on one device: its activations
  plus the attention scores and probabilities ([rows, heads, T, T] fp32; the model
  materialises them), heads and MLP split `tensor` ways."""
  return (rows * length * (8 * hidden + 3 * intermediate / tensor) * act_bytes
          + 2 * rows * (heads / tensor) * length * length * 4)


def kv_row_bytes(layers: int, length: int, kv_heads: int, head_dim: int, tensor: int,
                 cache_bytes: int) -> float:
  """K and V of one sampler row on one device (KV heads split `tensor` ways if it divides)."""
  kvh = kv_heads // tensor if kv_heads % tensor == 0 else kv_heads
  return 2.0 * layers * length * kvh * head_dim * cache_bytes
