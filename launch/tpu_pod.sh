#!/usr/bin/env bash
# Run a ragjax entry point on every worker of a Cloud TPU VM pod slice (v4 / v5p / v6e), the way
# JAX's multi-controller runtime expects: the same command on every worker; JAX finds the
# topology itself.  Sets up each worker with the TPU extra (`pip install -e .[tpu]`: the repo's
# pinned JAX with libtpu; SKIP_INSTALL=1 when the workers are ready), runs with
# RAGJAX_EXPECT_BACKEND=tpu (a worker whose JAX has no TPU stops in seconds with one error line
# instead of running on its CPU), then gathers the logs here.
#   TPU=my-v5p-32 ZONE=us-east5-a launch/tpu_pod.sh ragjax.train \
#       --config=configs/search_r1.py:qwen2.5-3b --config.model.checkpoint=/ckpt/qwen2.5-3b ...
# REPO (default ~/ragjax on the workers) must hold a checkout of this repository (with
# ../shared beside it if your config reads it); WORKERS (default all); DRY_RUN=1 prints the
# gcloud commands instead of running them.
set -euo pipefail
module="${1:?usage: TPU=name ZONE=zone launch/tpu_pod.sh MODULE [ARGS...]}"
shift
tpu="${TPU:?set TPU to the pod slice name}"
zone="${ZONE:?set ZONE to its zone}"
repo="${REPO:-~/ragjax}"
workers="${WORKERS:-all}"
logs="${LOG_DIR:-logs/$tpu}"
args=$(printf ' %q' "$@")
install="python -m pip install -q -e '.[tpu]' && "
[ -n "${SKIP_INSTALL:-}" ] && install=""
remote="cd $repo && ${install}RAGJAX_EXPECT_BACKEND=tpu RAGJAX_NUM_PROCESSES=auto \
python -m $module$args > ragjax_worker_\$(hostname).log 2>&1; \
rc=\$?; tail -n 3 ragjax_worker_\$(hostname).log; exit \$rc"
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }
run gcloud compute tpus tpu-vm ssh "$tpu" --zone="$zone" --worker="$workers" --command="$remote"
if [ -z "${DRY_RUN:-}" ]; then mkdir -p "$logs"; fi
run gcloud compute tpus tpu-vm scp "$tpu:$repo/ragjax_worker_*.log" "$logs/" --zone="$zone" \
  --worker="$workers"
