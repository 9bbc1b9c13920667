#!/usr/bin/env bash
# Multi-host launch (TPU pod slice or GPU cluster): run the same command on every host.
# JAX discovers the topology on TPU; on GPU clusters set the coordinator explicitly:
#   COORDINATOR=host0:1234 NUM_PROCESSES=4 PROCESS_ID=$RANK launch/multihost.sh ragjax.train --config=...
# ragjax calls jax.distributed.initialize() from these variables when NUM_PROCESSES > 1.
set -euo pipefail
module="${1:?usage: launch/multihost.sh MODULE [ARGS...]}"
shift
export RAGJAX_COORDINATOR="${COORDINATOR:-}"
export RAGJAX_NUM_PROCESSES="${NUM_PROCESSES:-1}"
export RAGJAX_PROCESS_ID="${PROCESS_ID:-0}"
exec python -m "$module" "$@"
