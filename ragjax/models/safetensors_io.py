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
    "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
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
      files = _shard_files(index)
    elif os.path.exists(single):
      files = ["model.safetensors"]
      check_inside(model_dir, "model.safetensors", single)
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


def _shard_files(index: str) -> list[str]:
  """The files a sharded checkpoint's `weight_map` names, each inside the directory."""
  try:
    with open(index, encoding="utf-8") as f:
      weight_map = json.load(f)["weight_map"]
  except (ValueError, KeyError, TypeError) as e:   # not UTF-8 / JSON, or no weight_map
    raise CheckpointError(f"{index} is not JSON with a 'weight_map' ({type(e).__name__}: "
                          f"{e})") from None
  if not isinstance(weight_map, dict):
    raise CheckpointError(f"{index}: 'weight_map' must be an object, got "
                          f"{type(weight_map).__name__}")
  for key, name in weight_map.items():
    norm = os.path.normpath(name) if isinstance(name, str) and name else ""
    if not norm or os.path.isabs(norm) or norm == os.pardir or \
        norm.startswith(os.pardir + os.sep):
      raise CheckpointError(f"{index}: weight_map[{key!r}] = {name!r} is outside the "
                            f"checkpoint directory")
    if not os.path.isfile(os.path.join(os.path.dirname(index), norm)):
      raise CheckpointError(f"{index}: weight_map[{key!r}] names {name!r}, which is missing")
    check_inside(os.path.dirname(index), name, f"{index}: weight_map[{key!r}]")
  return sorted(set(weight_map.values()))


def check_inside(model_dir: str, name: str, where: str) -> None:
  """`model_dir/name`, symlinks resolved, lies inside `model_dir`, or (a Hugging Face cache
  snapshot, `…/snapshots/REV/`) in the cache's `…/blobs/`; a link to any other file is
  refused before it is opened."""
  real = os.path.realpath(os.path.join(model_dir, name))
  home = os.path.realpath(model_dir)
  roots = [home]
  if os.path.basename(os.path.dirname(home)) == "snapshots":
    roots.append(os.path.join(os.path.dirname(os.path.dirname(home)), "blobs"))
  if not any(os.path.commonpath([real, r]) == r for r in roots):
    raise CheckpointError(f"{where}: {name!r} is a link to {real}, outside the checkpoint "
                          f"directory {model_dir}")


def _read_header(path: str) -> tuple[dict, int]:
  """The header of a safetensors file and where its data starts, checked against the file's
  size: every tensor's byte range must lie in the file and hold its shape."""
  size = os.path.getsize(path)
  if size < 8:
    raise CheckpointError(f"{path}: {size} bytes, too short for a safetensors file")
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8:
      raise CheckpointError(f"{path}: a header of {n} bytes in a file of {size} bytes (not a "
                            f"safetensors file, or cut short)")
    raw = f.read(n)
  try:
    header = json.loads(raw)
  except ValueError as e:                             # not UTF-8, or not JSON
    raise CheckpointError(f"{path}: the header is not JSON ({e})") from None
  if not isinstance(header, dict):
    raise CheckpointError(f"{path}: the header is not a JSON object")
  data, need, last = size - 8 - n, 0, None
  for key, info in header.items():
    if key == "__metadata__":
      continue
    end = _tensor_end(path, key, info)
    if end > need:
      need, last = end, key
  if need > data:
    raise CheckpointError(f"{path} is truncated: the file has {size} bytes, its tensors need "
                          f"{8 + n + need} (tensor {last!r} ends past the end)")
  return header, 8 + n


def _tensor_end(path: str, key: str, info) -> int:
  """Where tensor `key`'s bytes end in the data section, once its entry is checked."""
  try:
    dtype, shape = info["dtype"], [int(d) for d in info["shape"]]
    begin, end = (int(o) for o in info["data_offsets"])
  except (KeyError, TypeError, ValueError):
    raise CheckpointError(f"{path}: tensor {key!r} needs dtype, shape and data_offsets, got "
                          f"{str(info)[:200]}") from None
  if dtype not in _DTYPES:
    raise CheckpointError(f"{path}: tensor {key!r} has unknown dtype {str(dtype)[:40]!r} "
                          f"(safetensors dtypes: {', '.join(_DTYPES)})")
  if min(shape, default=0) < 0 or not 0 <= begin <= end:
    raise CheckpointError(f"{path}: tensor {key!r} has shape {shape} and data_offsets "
                          f"{[begin, end]}")
  want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
  if end - begin != want:
    raise CheckpointError(f"{path}: tensor {key!r} of shape {shape} ({dtype}) needs {want} "
                          f"bytes, its data_offsets hold {end - begin}")
  return end


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
