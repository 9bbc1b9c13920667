"""The CPU thread count, pinned so a run's numbers do not depend on the machine's core count.

XLA's CPU backend splits a reduction (a column sum, a gradient's batch sum) over its intra-op
thread pool, whose size is the number of cores the process may use; a different split adds in
a different order, so one seed gives different floats on a 1-core and a 2-core machine, and a
sampled RL run then diverges (found on the embedded default, whose table differed between two
machines; jax-ml/jax#39741 reports the same).  The pool has no size setting, but it is sized
from the process's CPU affinity when the backend starts, so `pin(n)` narrows the affinity to n
cores first.  Same n and an x86-64 CPU with AVX2 or AVX-512 (the two give the same bits here;
SSE-only code does not): same numbers.

Only a CPU-only run is pinned (`JAX_PLATFORMS=cpu`, or no GPU / TPU plug-in installed): on an
accelerator the host threads feed the devices and the device math is not affected.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm7_plugin",
                       "jax_rocm60_plugin", "libtpu")


def cpu_only() -> bool:
  """Whether JAX will run on the CPU: `JAX_PLATFORMS` says so, or no accelerator plug-in."""
  platforms = os.environ.get("JAX_PLATFORMS", "")
  if not platforms:
    import jax
    platforms = jax.config.jax_platforms or ""
  if platforms:
    return [p.strip() for p in platforms.split(",") if p.strip()] == ["cpu"]
  return not any(importlib.util.find_spec(m) for m in ACCELERATOR_PLUGINS)


def pin(n: int) -> int:
  """Narrows this process's CPU affinity to n cores (the lowest-numbered it may use) before
  JAX's CPU backend starts; returns the cores it runs on.  n <= 0 or an accelerator run:
  unchanged.  Fewer than n cores: all of them, with a warning (the numbers will differ from an
  n-core run).  The entry points call it first thing: once the backend has started its pool
  is sized, and narrowing the affinity then changes nothing."""
  n = int(n)
  if n <= 0 or not cpu_only() or not hasattr(os, "sched_setaffinity"):
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < n:
    warnings.warn(f"cpu_threads={n} but this process may use only {len(cores)} core(s): its "
                  f"floating-point results will differ from a {n}-core run", stacklevel=2)
    return len(cores)
  os.sched_setaffinity(0, cores[:n])
  return n

