"""Multi-host start-up: one call at the top of every entry point."""

from __future__ import annotations

import os

import jax


def maybe_initialize() -> int:
  """Calls `jax.distributed.initialize` when launched on several hosts; returns the process count.

  On TPU pods JAX finds the topology itself when `RAGJAX_NUM_PROCESSES` > 1 is set without a
  coordinator; on GPU clusters `launch/multihost.sh` passes coordinator, count and id.
  """
  n = int(os.environ.get("RAGJAX_NUM_PROCESSES", "1"))
  if n <= 1:
    return 1
  coordinator = os.environ.get("RAGJAX_COORDINATOR") or None
  if coordinator:
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n,
                               process_id=int(os.environ.get("RAGJAX_PROCESS_ID", "0")))
  else:
    jax.distributed.initialize()
  return jax.process_count()
