"""`python -m ragjax.tools.multihost_check`: is the multi-controller runtime up on this launch?

Run under a launcher (`NUM_PROCESSES=2 launch/local.sh ragjax.tools.multihost_check`, the TPU
pod or Slurm script): every process initialises JAX's distributed runtime, sums a global array
sharded over every device of every process, gathers each process's hostname, and prints one
JSON line.  Exits 1 if the processes disagree.
"""

from __future__ import annotations

import json
import socket
import sys


def main() -> int:
  from ragjax.parallel.distributed import allgather_objects, global_array, maybe_initialize
  maybe_initialize()
  import jax
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  mesh = Mesh(np.asarray(jax.devices()), ("data",))
  n = jax.device_count()
  x = global_array(np.arange(n, dtype=np.float32), NamedSharding(mesh, P("data")))
  total = float(jax.jit(lambda v: v.sum())(x))
  hosts = allgather_objects(socket.gethostname())
  ok = total == n * (n - 1) / 2 and len(hosts) == jax.process_count()
  print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                    "devices": n, "local_devices": jax.local_device_count(), "sum": total,
                    "hosts": hosts, "ok": ok}), flush=True)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
