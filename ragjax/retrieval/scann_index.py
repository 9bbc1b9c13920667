"""ScaNN (tree + anisotropic hashing + reorder) over embedding rows; numpy API, no TensorFlow.

Defaults come from two sweeps in `ragjax.bench.retrieval` (recorded in BENCHMARKS.md).  On 1M
synthetic clustered 384-d vectors, 2% of sqrt(N) = 1000 leaves already gave recall@10 0.963 vs
exact (reorder depth was the knob there: 200 -> 0.963, 100 -> 0.943, AH codes alone 0.49).  Real
MiniLM embeddings of the 31k-passage corpus are far less clustered: with 176 leaves, probing
4 / 18 / 35 / 60 leaves gave 0.74 / 0.92 / 0.965 / 0.982 top-10 agreement with exact search.
So the default probes 20% of the leaves and re-scores 200 candidates.
Reordering uses int8 vectors so the float32 matrix need not stay in memory (4x smaller).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Optional

import numpy as np

_CONFIG_FILE = "ragjax_scann.json"


@dataclasses.dataclass(frozen=True)
class ScannConfig:
  num_leaves: Optional[int] = None        # None: 1 (no tree) below brute_force_below, else ~sqrt(N)
  leaves_to_search_frac: float = 0.2      # fraction of leaves probed per query
  min_leaves_to_search: int = 4
  brute_force_below: int = 20_000         # ScaNN's own advice: no partitioning for small N
  training_sample_size: int = 100_000     # k-means / AH training sample (ScaNN's default)
  dims_per_block: int = 2                 # AH: 4-bit code per block of this many dims
  anisotropic_threshold: float = 0.2
  reorder: int = 200                      # candidates re-scored before the final top-k
  reorder_dtype: str = "int8"             # "int8" | "bfloat16" | "float32" | "none"
  spherical: bool = True                  # unit-norm embeddings
  training_threads: int = 0               # 0 = all cores

  def __post_init__(self):
    lowest = {"num_leaves": 1, "min_leaves_to_search": 1, "brute_force_below": 0,
              "training_sample_size": 1, "dims_per_block": 1, "reorder": 0, "training_threads": 0}
    for name, lo in lowest.items():
      value = getattr(self, name)
      if value is None and name == "num_leaves":
        continue
      if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    if not 0 < self.leaves_to_search_frac <= 1:
      raise ValueError(f"leaves_to_search_frac must be in (0, 1], got {self.leaves_to_search_frac!r}")
    if self.reorder_dtype not in ("int8", "bfloat16", "float32", "none"):
      raise ValueError(f"reorder_dtype must be int8, bfloat16, float32 or none, got {self.reorder_dtype!r}")

  def leaves_for(self, n: int) -> int:
    if self.num_leaves is not None:
      return max(1, min(self.num_leaves, n))
    if n < self.brute_force_below:
      return 1
    return int(round(math.sqrt(n)))

  def leaves_to_search(self, leaves: int) -> int:
    return min(leaves, max(self.min_leaves_to_search, round(leaves * self.leaves_to_search_frac)))

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


class ScannIndex:
  """Build with `ScannIndex.build(vectors, config)`, persist with `save(dir)` / `load(dir)`."""

  def __init__(self, searcher, config: ScannConfig, n: int, dim: int, num_leaves: int):
    self._searcher, self.config, self.n, self.dim, self.num_leaves = searcher, config, n, dim, num_leaves

  @classmethod
  def build(cls, vectors: np.ndarray, config: ScannConfig = ScannConfig(), k: int = 10) -> "ScannIndex":
    import scann  # heavy import; only when a ScaNN index is used
    from scann.scann_ops.py.scann_builder import ReorderType
    vectors = np.ascontiguousarray(vectors, np.float32)
    if vectors.ndim != 2 or vectors.shape[0] < 2:
      raise ValueError(f"ScaNN needs an [N >= 2, D] matrix, got shape {vectors.shape}")
    n, dim = vectors.shape
    leaves = config.leaves_for(n)
    b = scann.scann_ops_pybind.builder(vectors, k, "dot_product")
    if leaves > 1:
      b = b.tree(num_leaves=leaves, num_leaves_to_search=config.leaves_to_search(leaves),
                 training_sample_size=min(config.training_sample_size, n), spherical=config.spherical)
    b = b.score_ah(config.dims_per_block, anisotropic_quantization_threshold=config.anisotropic_threshold,
                   training_sample_size=min(config.training_sample_size, n))
    if config.reorder_dtype != "none" and config.reorder > 0:
      rt = {"int8": ReorderType.INT8, "bfloat16": ReorderType.BFLOAT16,
            "float32": ReorderType.FLOAT32}[config.reorder_dtype]
      b = b.reorder(config.reorder, quantize=rt)
    if config.training_threads:
      b = b.set_n_training_threads(config.training_threads)
    return cls(b.build(), config, n, dim, leaves)

  def search(self, queries: np.ndarray, k: int, leaves_to_search: Optional[int] = None,
             reorder: Optional[int] = None, parallel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """queries [Q, D] -> (rows [Q, k] int64 with -1 padding, scores [Q, k] float32)."""
    queries = np.ascontiguousarray(queries, np.float32)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f"queries must be [Q, {self.dim}], got shape {queries.shape}")
    if queries.shape[0] == 0:
      return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    leaves = leaves_to_search or self.config.leaves_to_search(self.num_leaves)
    pre = max(reorder or self.config.reorder, k) if self.config.reorder_dtype != "none" else k
    fn = self._searcher.search_batched_parallel if parallel else self._searcher.search_batched
    idx, dist = fn(queries, final_num_neighbors=k, pre_reorder_num_neighbors=pre,
                   leaves_to_search=min(leaves, self.num_leaves))
    idx, dist = np.asarray(idx, np.int64), np.asarray(dist, np.float32)
    rows = np.full((queries.shape[0], k), -1, np.int64)
    scores = np.full((queries.shape[0], k), -np.inf, np.float32)
    rows[:, :idx.shape[1]], scores[:, :idx.shape[1]] = idx, dist
    return rows, scores

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    self._searcher.serialize(directory, relative_path=True)
    with open(os.path.join(directory, _CONFIG_FILE), "w") as f:
      json.dump({"config": self.config.to_json(), "n": self.n, "dim": self.dim,
                 "num_leaves": self.num_leaves}, f, indent=1)

  @classmethod
  def load(cls, directory: str, allow_pickle: bool = False) -> "ScannIndex":
    """Refuses a directory holding a pickle (ScaNN would unpickle `scann_docids.pkl`) unless
    `allow_pickle`; never writes into `directory` (ScaNN's back-compat shim would)."""
    import scann
    from ragjax.retrieval.trust import refuse_pickles
    refuse_pickles(directory, allow_pickle)
    meta_path = os.path.join(directory, _CONFIG_FILE)
    if not os.path.exists(meta_path):
      raise FileNotFoundError(f"no ScaNN index at {directory} (missing {_CONFIG_FILE})")
    with open(meta_path) as f:
      meta = json.load(f)
    searcher = scann.scann_ops_pybind.load_searcher(directory, assets_backcompat_shim=False)
    return cls(searcher, ScannConfig(**meta["config"]), meta["n"], meta["dim"], meta["num_leaves"])

  @staticmethod
  def bytes_per_vector(dim: int, config: ScannConfig) -> float:
    """Resident bytes per datapoint: 4-bit AH codes + reorder copy + partition bookkeeping."""
    ah = math.ceil(dim / config.dims_per_block) * 0.5
    reorder = {"int8": dim + 4, "bfloat16": 2 * dim, "float32": 4 * dim, "none": 0}[config.reorder_dtype]
    return ah + reorder + 4   # + a 32-bit datapoint index in its leaf
