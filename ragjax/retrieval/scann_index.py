"""ScaNN (tree + anisotropic hashing) over embedding rows, with re-scoring from disk; numpy API.

Memory.  ScaNN keeps the partitioner (the leaf centroids) and the 4-bit AH codes in RAM: about
dim / 4 + 4 bytes a vector.  The vectors that re-score each query's top-R AH candidates stay on
disk (`reorder_store="disk"`, the default: bfloat16 rows of `reorder.npy`, memory-mapped and read
only at the candidates; see `ragjax.retrieval.reorder`), so a 21M x 768 index needs ~4 GB of RAM
instead of 21 GB with ScaNN's in-memory int8 copy (`reorder_store="ram"`, still available).

Building.  `build_streaming` reads rows chunk by chunk (from the tensorstore embeddings or any
`read(start, stop)`): it trains the partitioner and the AH codebooks on a seeded random sample,
then adds every row in order with ScaNN's upsert and streams the re-scoring rows to disk, so
memory stays bounded by the sample, one chunk and the codes.  Training is seeded (k-means++ and
AH sampling), so the same rows and config give the same index.

Search settings.  Leaves probed and re-scoring depth are search-time knobs: the defaults below
(20% of the leaves, 200 candidates) suit real MiniLM embeddings (on the 31k corpus, probing
4 / 18 / 35 / 60 of 176 leaves gave 0.74 / 0.92 / 0.965 / 0.982 top-10 agreement with exact),
but clustered data needs far fewer leaves (1% gave 0.96 on 1M synthetic vectors).  So
`python -m ragjax.retrieval.tune` measures them on the user's own queries and records the
fastest setting that meets a recall target; `set_search` applies it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Callable, Optional

import numpy as np

from ragjax.retrieval.reorder import FILENAME as REORDER_FILE, ReorderVectors, ReorderWriter, encode_rows

_CONFIG_FILE = "ragjax_scann.json"
_RAM_DTYPES = ("int8", "bfloat16", "float32", "none")
_DISK_DTYPES = ("bfloat16", "float32", "none")


@dataclasses.dataclass(frozen=True)
class ScannConfig:
  num_leaves: Optional[int] = None        # None: 1 (no tree) below brute_force_below, else ~sqrt(N)
  leaves_to_search_frac: float = 0.2      # fraction of leaves probed per query (untuned default)
  min_leaves_to_search: int = 4
  brute_force_below: int = 20_000         # ScaNN's own advice: no partitioning for small N
  training_sample_size: int = 100_000     # rows k-means and AH train on (at least 64 per leaf)
  dims_per_block: int = 2                 # AH: 4-bit code per block of this many dims
  anisotropic_threshold: float = 0.2
  reorder: int = 200                      # candidates re-scored before the final top-k
  reorder_dtype: str = "bfloat16"         # disk: bfloat16 | float32 | none; ram: int8 | bfloat16 | float32 | none
  reorder_store: str = "disk"             # "disk": memory-mapped file; "ram": ScaNN's in-memory copy
  spherical: bool = True                  # unit-norm embeddings
  training_threads: int = 0               # 0 = all cores
  seed: int = 0                           # training sample, k-means++ and AH sampling

  def __post_init__(self):
    lowest = {"num_leaves": 1, "min_leaves_to_search": 1, "brute_force_below": 0,
              "training_sample_size": 1, "dims_per_block": 1, "reorder": 0, "training_threads": 0,
              "seed": 0}
    for name, lo in lowest.items():
      value = getattr(self, name)
      if value is None and name == "num_leaves":
        continue
      if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    if not 0 < self.leaves_to_search_frac <= 1:
      raise ValueError(f"leaves_to_search_frac must be in (0, 1], got {self.leaves_to_search_frac!r}")
    if self.reorder_store not in ("disk", "ram"):
      raise ValueError(f"reorder_store must be 'disk' or 'ram', got {self.reorder_store!r}")
    allowed = _DISK_DTYPES if self.reorder_store == "disk" else _RAM_DTYPES
    if self.reorder_dtype not in allowed:
      raise ValueError(f"reorder_dtype must be one of {', '.join(allowed)} with reorder_store="
                       f"{self.reorder_store!r}, got {self.reorder_dtype!r}")

  @classmethod
  def from_json(cls, d: dict) -> "ScannConfig":
    """Reads a saved config; one written before `reorder_store` existed kept ScaNN's RAM copy."""
    d = dict(d)
    d.setdefault("reorder_store", "ram")
    return cls(**d)

  def leaves_for(self, n: int) -> int:
    if self.num_leaves is not None:
      return max(1, min(self.num_leaves, n))
    if n < self.brute_force_below:
      return 1
    return int(round(math.sqrt(n)))

  def leaves_to_search(self, leaves: int) -> int:
    return min(leaves, max(self.min_leaves_to_search, round(leaves * self.leaves_to_search_frac)))

  def sample_size(self, n: int, leaves: int) -> int:
    """Training rows: `training_sample_size`, raised to 64 a leaf (ScaNN's k-means wants >= 50)."""
    return min(n, max(self.training_sample_size, 64 * leaves if leaves > 1 else 0))

  @property
  def rescored(self) -> bool:
    return self.reorder_dtype != "none" and self.reorder > 0

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
  """Sorted distinct rows of [0, n): all of them when size >= n."""
  if size >= n:
    return np.arange(n, dtype=np.int64)
  return np.sort(np.random.default_rng(seed).choice(n, size, replace=False)).astype(np.int64)


def _gather(read: Callable[[int, int], np.ndarray], rows: np.ndarray, n: int, dim: int,
            chunk_rows: int) -> np.ndarray:
  """rows (sorted) of the matrix `read` serves, reading each chunk that holds one once."""
  out = np.empty((len(rows), dim), np.float32)
  for a in range(0, n, chunk_rows):
    b = min(n, a + chunk_rows)
    lo, hi = np.searchsorted(rows, [a, b])
    if lo < hi:
      out[lo:hi] = _checked(read(a, b), a, b, dim)[rows[lo:hi] - a]
  return out


def _checked(block, a: int, b: int, dim: int) -> np.ndarray:
  block = np.ascontiguousarray(block, np.float32)
  if block.shape != (b - a, dim):
    raise ValueError(f"rows {a}:{b} came back with shape {block.shape}, expected {(b - a, dim)}")
  return block


def _seeded(config_text: str, seed: int) -> str:
  """ScaNN's text config with fixed seeds for k-means and AH training (so builds repeat)."""
  for block, fields in (("partitioning {", ("clustering_seed",)),
                        ("asymmetric_hash {", ("clustering_seed", "sampling_seed"))):
    if block in config_text:
      config_text = config_text.replace(
          block, block + "".join(f"\n {f}: {seed}" for f in fields), 1)
  return config_text


def _train(sample: np.ndarray, leaves: int, config: ScannConfig):
  """A ScaNN searcher trained on (and holding) `sample`."""
  from scann.scann_ops.py import scann_ops_pybind
  from scann.scann_ops.py.scann_builder import ReorderType
  b = scann_ops_pybind.builder(sample, 10, "dot_product")
  if leaves > 1:
    b = b.tree(num_leaves=leaves, num_leaves_to_search=config.leaves_to_search(leaves),
               training_sample_size=len(sample), spherical=config.spherical, random_init=False)
  b = b.score_ah(config.dims_per_block, anisotropic_quantization_threshold=config.anisotropic_threshold,
                 training_sample_size=len(sample))
  if config.reorder_store == "ram" and config.rescored:
    rt = {"int8": ReorderType.INT8, "bfloat16": ReorderType.BFLOAT16,
          "float32": ReorderType.FLOAT32}[config.reorder_dtype]
    b = b.reorder(config.reorder, quantize=rt)
  return scann_ops_pybind.create_searcher(sample, _seeded(b.create_config(), config.seed),
                                          config.training_threads)


class ScannIndex:
  """`build(vectors)` / `build_streaming(read, n, dim, directory=...)`, `save(dir)` / `load(dir)`."""

  def __init__(self, searcher, config: ScannConfig, n: int, dim: int, num_leaves: int,
               reorder: Optional[ReorderVectors] = None):
    self._searcher, self.config, self.n, self.dim, self.num_leaves = searcher, config, n, dim, num_leaves
    self.reorder_vectors = reorder
    self.leaves_to_search = config.leaves_to_search(num_leaves)
    self.reorder_depth = config.reorder

  def set_search(self, leaves_to_search: Optional[int] = None, reorder: Optional[int] = None) -> None:
    """Default search settings (e.g. the tuned ones recorded in the index's index.json)."""
    if leaves_to_search is not None:
      if not isinstance(leaves_to_search, int) or not 1 <= leaves_to_search <= self.num_leaves:
        raise ValueError(f"leaves_to_search must be in 1..{self.num_leaves}, got {leaves_to_search!r}")
      self.leaves_to_search = leaves_to_search
    if reorder is not None:
      if not isinstance(reorder, int) or reorder < 1:
        raise ValueError(f"reorder must be an int >= 1, got {reorder!r}")
      self.reorder_depth = reorder

  @classmethod
  def build(cls, vectors: np.ndarray, config: ScannConfig = ScannConfig(), k: int = 10,
            directory: Optional[str] = None) -> "ScannIndex":
    """An index of the in-memory matrix `vectors` [N, D] (written to `directory` if given)."""
    vectors = np.ascontiguousarray(vectors, np.float32)
    if vectors.ndim != 2 or vectors.shape[0] < 2:
      raise ValueError(f"ScaNN needs an [N >= 2, D] matrix, got shape {vectors.shape}")
    n, dim = vectors.shape
    if config.reorder_store == "ram":
      leaves = config.leaves_for(n)
      index = cls(_train(vectors, leaves, config), config, n, dim, leaves)
      if directory:
        index.save(directory)
      return index
    return cls.build_streaming(lambda a, b: vectors[a:b], n, dim, config, directory=directory)

  @classmethod
  def build_streaming(cls, read: Callable[[int, int], np.ndarray], n: int, dim: int,
                      config: ScannConfig = ScannConfig(), directory: Optional[str] = None,
                      chunk_rows: int = 65536, progress: bool = False) -> "ScannIndex":
    """Indexes rows [0, n) served by `read(start, stop)` -> [stop - start, dim] float32.

    Trains on `config.sample_size` seeded random rows, then adds all rows in order (ScaNN's
    upsert; row i of the corpus is datapoint i) while streaming the re-scoring rows to
    `directory/reorder.npy` (or memory without a directory).  Reads each chunk at most twice.
    """
    if config.reorder_store != "disk":
      raise ValueError("reorder_store='ram' keeps ScaNN's re-scoring copy in memory and needs every "
                       "vector at once: use ScannIndex.build(vectors), or reorder_store='disk'")
    if n < 2:
      raise ValueError(f"ScaNN needs at least 2 rows, got {n}")
    leaves = config.leaves_for(n)
    rows = sample_rows(n, config.sample_size(n, leaves), config.seed)
    sample = _gather(read, rows, n, dim, chunk_rows)
    searcher = _train(sample, leaves, config)
    whole = len(rows) == n                 # the sample is the corpus, in order: nothing to add
    raw = searcher.searcher
    if not whole:
      raw.delete(list(range(len(rows) - 1, -1, -1)))      # keep the training, drop the sample
    sink = None
    if config.rescored:
      if directory:
        os.makedirs(directory, exist_ok=True)
        sink = ReorderWriter(os.path.join(directory, REORDER_FILE), n, dim, config.reorder_dtype)
      else:
        sink = _ArraySink(n, dim, config.reorder_dtype)
    bar = None
    if progress:
      from tqdm import tqdm
      bar = tqdm(total=n, unit="vector", desc="scann add", dynamic_ncols=True)
    for a in range(0, n, chunk_rows):
      b = min(n, a + chunk_rows)
      block = sample[a:b] if whole else _checked(read(a, b), a, b, dim)
      if not whole:
        ids = raw.upsert([None] * (b - a), list(block), 256)
        if ids[0] != a or ids[-1] != b - 1:
          raise RuntimeError(f"ScaNN placed rows {a}:{b} at datapoints {ids[0]}..{ids[-1]}")
      if sink is not None:
        sink.append(block)
      if bar is not None:
        bar.update(b - a)
    if bar is not None:
      bar.close()
    del sample
    reorder = None
    if sink is not None:
      sink.close()
      reorder = ReorderVectors.open(sink.path) if directory else ReorderVectors(sink.rows)
    index = cls(searcher, config, n, dim, leaves, reorder)
    if directory:
      index.save(directory)
    return index

  def search(self, queries: np.ndarray, k: int, leaves_to_search: Optional[int] = None,
             reorder: Optional[int] = None, parallel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """queries [Q, D] -> (rows [Q, k] int64 with -1 padding, scores [Q, k] float32)."""
    queries = np.ascontiguousarray(queries, np.float32)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f"queries must be [Q, {self.dim}], got shape {queries.shape}")
    if queries.shape[0] == 0:
      return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    leaves = min(leaves_to_search or self.leaves_to_search, self.num_leaves)
    depth = max(reorder or self.reorder_depth, k)
    fn = self._searcher.search_batched_parallel if parallel else self._searcher.search_batched
    if self.reorder_vectors is not None:          # AH candidates, re-scored from disk
      idx, dist = fn(queries, final_num_neighbors=depth, leaves_to_search=leaves)
      return self.reorder_vectors.rescore(queries, _padded(idx, dist, depth)[0], k)
    pre = depth if self.config.rescored else k
    idx, dist = fn(queries, final_num_neighbors=k, pre_reorder_num_neighbors=pre,
                   leaves_to_search=leaves)
    return _padded(idx, dist, k)

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    self._searcher.serialize(directory, relative_path=True)
    if self.reorder_vectors is not None:
      path = os.path.join(directory, REORDER_FILE)
      if self.reorder_vectors.path is None or os.path.abspath(self.reorder_vectors.path) != os.path.abspath(path):
        with ReorderWriter(path, self.n, self.dim, self.reorder_vectors.dtype) as w:
          for a in range(0, self.n, 65536):
            w.append(self.reorder_vectors.widen(self.reorder_vectors.rows[a:a + 65536]))
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
    config = ScannConfig.from_json(meta["config"])
    reorder = None
    if config.reorder_store == "disk" and config.rescored:
      reorder = ReorderVectors.open(os.path.join(directory, REORDER_FILE))
      if (reorder.n, reorder.dim) != (meta["n"], meta["dim"]):
        raise ValueError(f"{reorder.path} holds [{reorder.n}, {reorder.dim}], the index "
                         f"[{meta['n']}, {meta['dim']}]")
    searcher = scann.scann_ops_pybind.load_searcher(directory, assets_backcompat_shim=False)
    return cls(searcher, config, meta["n"], meta["dim"], meta["num_leaves"], reorder)

  @staticmethod
  def bytes_per_vector(dim: int, config: ScannConfig) -> float:
    """Resident bytes per datapoint: 4-bit AH codes + in-RAM reorder copy + leaf bookkeeping."""
    ah = math.ceil(dim / config.dims_per_block) * 0.5
    reorder = 0
    if config.reorder_store == "ram":
      reorder = {"int8": dim + 4, "bfloat16": 2 * dim, "float32": 4 * dim, "none": 0}[config.reorder_dtype]
    return ah + reorder + 4   # + a 32-bit datapoint index in its leaf


def _padded(idx, dist, width: int) -> tuple[np.ndarray, np.ndarray]:
  """ScaNN's [Q, <=width] ids and scores as [Q, width] (-1, -inf where it found fewer: ScaNN
  pads those slots with id 0 and a NaN score)."""
  idx, dist = np.asarray(idx, np.int64), np.asarray(dist, np.float32)
  rows = np.full((idx.shape[0], width), -1, np.int64)
  scores = np.full((idx.shape[0], width), -np.inf, np.float32)
  rows[:, :idx.shape[1]], scores[:, :idx.shape[1]] = idx, dist
  missing = np.isnan(scores)
  rows[missing], scores[missing] = -1, -np.inf
  return rows, scores


class _ArraySink:
  """In-memory stand-in for `ReorderWriter` (an index built without a directory)."""

  def __init__(self, n: int, dim: int, dtype: str):
    self.dtype, self.filled, self.path = dtype, 0, None
    self.rows = np.empty((n, dim), np.uint16 if dtype == "bfloat16" else np.float32)

  def append(self, block: np.ndarray) -> None:
    self.rows[self.filled:self.filled + len(block)] = encode_rows(block, self.dtype)
    self.filled += len(block)

  def close(self) -> None:
    pass

