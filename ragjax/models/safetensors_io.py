"""Zero-copy reading of (possibly sharded) safetensors checkpoints.

`safetensors`' numpy front end cannot return bfloat16, which every modern checkpoint uses, so
tensors are memory-mapped here with `ml_dtypes` dtypes; only the tensor being converted is
ever resident.  Writing uses the `safetensors` library itself.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Iterator

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}


class CheckpointError(ValueError):
  """A checkpoint that does not match the model it is loaded into."""


class SafetensorsReader:
  """Lazily maps every tensor of `model.safetensors` or a sharded `*.index.json` directory."""

  def __init__(self, model_dir: str):
    self.model_dir = model_dir
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
      with open(index) as f:
        weight_map = json.load(f)["weight_map"]
      files = sorted(set(weight_map.values()))
    elif os.path.exists(single):
      files = ["model.safetensors"]
    else:
      raise FileNotFoundError(
          f"no model.safetensors or model.safetensors.index.json in {model_dir!r}")
    self._entries: dict[str, tuple[str, dict, int]] = {}
    for name in files:
      path = os.path.join(model_dir, name)
      header, data_start = _read_header(path)
      for key, info in header.items():
        if key == "__metadata__":
          continue
        self._entries[key] = (path, info, data_start)
    self._maps: dict[str, np.memmap] = {}

  def keys(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, key: str) -> bool:
    return key in self._entries

  def shape(self, key: str) -> tuple[int, ...]:
    return tuple(self._entries[key][1]["shape"])

  def get(self, key: str) -> np.ndarray:
    """A read-only view of one tensor (no copy until converted)."""
    path, info, start = self._entries[key]
    if info["dtype"] not in _DTYPES:
      raise CheckpointError(f"tensor {key!r} in {path} has unsupported dtype {info['dtype']}")
    if path not in self._maps:
      self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
    begin, end = info["data_offsets"]
    raw = self._maps[path][start + begin:start + end]
    return raw.view(_DTYPES[info["dtype"]]).reshape(info["shape"])

  def items(self) -> Iterator[tuple[str, np.ndarray]]:
    for key in self.keys():
      yield key, self.get(key)


def _read_header(path: str) -> tuple[dict, int]:
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
  return header, 8 + n


def write_safetensors(path: str, tensors: dict[str, np.ndarray], metadata: dict | None = None):
  """Writes numpy arrays (bfloat16 included) with the safetensors library."""
  from safetensors.numpy import save_file
  try:
    save_file(tensors, path, metadata=metadata or {"format": "pt"})
  except (TypeError, ValueError):
    # bfloat16 arrays are not understood by safetensors.numpy: store their bits via the flax path.
    from safetensors.flax import save_file as save_flax
    import jax.numpy as jnp
    save_flax({k: jnp.asarray(v) for k, v in tensors.items()}, path,
              metadata=metadata or {"format": "pt"})
