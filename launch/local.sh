#!/usr/bin/env bash
# Run a ragjax entry point on this machine; extra arguments go to the module.
#   launch/local.sh ragjax.train --config=configs/search_r1.py:tiny
# NUM_PROCESSES=N runs N JAX processes on 127.0.0.1 (multi-host on one machine, for testing the
# multi-controller path): a coordinator on a free port, one log per process under
# ${LOG_DIR:-logs}/, and a non-zero exit if any process fails.  DRY_RUN=1 prints the commands.
# The backend the run expects (RAGJAX_EXPECT_BACKEND, checked by every entry point: no silent
# CPU fallback) is this machine's: gpu when nvidia-smi lists a GPU, tpu when it has TPU
# devices (/dev/accel*, /dev/vfio/N), else cpu; set RAGJAX_EXPECT_BACKEND to choose.
set -euo pipefail
module="${1:?usage: [NUM_PROCESSES=N] launch/local.sh MODULE [ARGS...]}"
shift
n="${NUM_PROCESSES:-1}"
detect() {
  if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
    echo gpu
  elif compgen -G '/dev/accel[0-9]*' > /dev/null || compgen -G '/dev/vfio/[0-9]*' > /dev/null; then
    echo tpu
  else
    echo cpu
  fi
}
export RAGJAX_EXPECT_BACKEND="${RAGJAX_EXPECT_BACKEND:-$(detect)}"
if [ "$n" -le 1 ]; then
  if [ -n "${DRY_RUN:-}" ]; then
    echo "RAGJAX_EXPECT_BACKEND=$RAGJAX_EXPECT_BACKEND python -m $module $*"; exit 0
  fi
  exec python -m "$module" "$@"
fi
port="${COORDINATOR_PORT:-$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
logs="${LOG_DIR:-logs}"
if [ -z "${DRY_RUN:-}" ]; then mkdir -p "$logs"; fi
pids=()
for ((i = 0; i < n; i++)); do
  cmd="RAGJAX_EXPECT_BACKEND=$RAGJAX_EXPECT_BACKEND RAGJAX_COORDINATOR=127.0.0.1:$port RAGJAX_NUM_PROCESSES=$n RAGJAX_PROCESS_ID=$i python -m $module $*"
  if [ -n "${DRY_RUN:-}" ]; then echo "$cmd > $logs/proc$i.log"; continue; fi
  RAGJAX_COORDINATOR="127.0.0.1:$port" RAGJAX_NUM_PROCESSES="$n" RAGJAX_PROCESS_ID="$i" \
    python -m "$module" "$@" > "$logs/proc$i.log" 2>&1 &
  pids+=("$!")
done
[ -n "${DRY_RUN:-}" ] && exit 0
status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "process $i failed; see $logs/proc$i.log:" >&2
    tail -n 5 "$logs/proc$i.log" >&2
    status=1
  fi
done
exit "$status"
