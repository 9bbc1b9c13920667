"""Multi-host: start-up, and moving host data between JAX processes.

Every entry point calls `maybe_initialize()` first.  Launched on several hosts (the variables
`launch/multihost.sh` or a TPU pod sets), it calls `jax.distributed.initialize` with bounded
timeouts, so a process that dies fails the job with a message instead of a hang.  The helpers
below are no-ops on one process:
  - `shard_range(n)`: this process's contiguous share of n items (prompts: groups never split);
  - `allgather_objects(obj)`: every process's Python object, in process order (pickled);
  - `to_host(x)`: a global jax array as a full numpy array on every process;
  - `global_array(x, sharding)`: a numpy array every process holds, as a global jax array;
  - `is_main()`: the process that writes logs and exports;
  - `one_writer(name)`: the main process writes files first, the others then read them.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import jax
import numpy as np

HEARTBEAT_S = int(os.environ.get("RAGJAX_HEARTBEAT_S", "60"))


def maybe_initialize() -> int:
  """Calls `jax.distributed.initialize` when launched on several hosts; returns the process
  count.  `RAGJAX_NUM_PROCESSES=auto` (TPU pods): JAX finds the topology itself; N > 1 with
  `RAGJAX_COORDINATOR` / `RAGJAX_PROCESS_ID`: an explicit cluster (Slurm, local tests)."""
  raw = os.environ.get("RAGJAX_NUM_PROCESSES", "1")
  n = 2 if raw == "auto" else int(raw)
  if n <= 1 or jax.distributed.is_initialized():
    return jax.process_count() if n > 1 else 1
  timeouts = dict(initialization_timeout=int(os.environ.get("RAGJAX_INIT_TIMEOUT_S", "300")),
                  heartbeat_timeout_seconds=HEARTBEAT_S,
                  shutdown_timeout_seconds=int(os.environ.get("RAGJAX_SHUTDOWN_TIMEOUT_S", "60")))
  coordinator = os.environ.get("RAGJAX_COORDINATOR") or None
  if coordinator and raw != "auto":
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n,
                               process_id=int(os.environ.get("RAGJAX_PROCESS_ID", "0")),
                               **timeouts)
  else:
    jax.distributed.initialize(**timeouts)
  return jax.process_count()


def is_main() -> bool:
  return jax.process_index() == 0


def shard_range(n: int, index: int = None, count: int = None) -> tuple[int, int]:
  """[start, end) of this process's contiguous share of n items (the first shares take the
  remainder), so a process always rolls out whole groups."""
  index = jax.process_index() if index is None else index
  count = jax.process_count() if count is None else count
  base, extra = divmod(n, count)
  start = index * base + min(index, extra)
  return start, start + base + (1 if index < extra else 0)


def allgather_objects(obj: Any) -> list:
  """[process 0's obj, process 1's obj, ...] on every process (pickled through a collective)."""
  if jax.process_count() == 1:
    return [obj]
  from jax.experimental import multihost_utils
  data = np.frombuffer(pickle.dumps(obj), np.uint8)
  sizes = multihost_utils.process_allgather(np.asarray([data.size], np.int64))
  width = int(np.max(sizes))
  padded = np.zeros((width,), np.uint8)
  padded[:data.size] = data
  rows = multihost_utils.process_allgather(padded)
  return [pickle.loads(rows[i, :int(sizes[i][0])].tobytes()) for i in range(rows.shape[0])]


def to_host(x) -> np.ndarray:
  """The full value of a (possibly multi-process) jax array as numpy, on every process."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def global_array(x, sharding) -> jax.Array:
  """`x` (the same numpy value on every process) placed with a global `sharding`."""
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


class one_writer:
  """`with one_writer("prepare") as write:` the main process does the block first with
  write=True (files, indexes), then the others do it with write=False (reading what it wrote);
  on one process, write=True."""

  def __init__(self, name: str):
    self.name = name
    self.many = jax.process_count() > 1

  def __enter__(self) -> bool:
    if self.many and not is_main():
      barrier(self.name)            # wait for the writer
    return not self.many or is_main()

  def __exit__(self, *exc):
    if self.many and is_main() and exc[0] is None:
      barrier(self.name)            # release the readers
    return False


_BARRIERS: dict = {}


def barrier(name: str, timeout_s: int = None) -> None:
  """Waits until every process reaches barrier `name` (through the coordination service, so a
  long wait is fine; names are made unique per call)."""
  from orbax.checkpoint import multihost
  _BARRIERS[name] = _BARRIERS.get(name, 0) + 1
  timeout_s = timeout_s or int(os.environ.get("RAGJAX_BARRIER_TIMEOUT_S", "3600"))
  multihost.sync_global_processes(f"ragjax_{name}_{_BARRIERS[name]}", timeout=timeout_s)
