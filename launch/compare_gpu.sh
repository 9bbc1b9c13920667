#!/usr/bin/env bash
# The methods' table on SmolLM2 (issue 63) on one GPU, within a time budget, its row records and
# table copied to OUT.
#   launch/compare_gpu.sh OUT [GGUF]     # GGUF: the SmolLM2 file, where no wheel is installed
# Runs `python -m ragjax.compare` over every `:smollm2` config (the CPU table's configs: the same
# budget of 24 GRPO steps of 8 x 8 rollouts for every method, so a row measured here fits the CPU
# table's --rows_from and the other way round), reading the rows already measured from
# results/compare_smollm2/ (nothing is trained or evaluated again for them) and writing each new
# row as a row record.  It stops at BUDGET_S (default 480 s); the same command on a warm machine
# resumes it (runs from their checkpoints, evaluations at the next batch), and each finished row
# is a file in OUT/rows/ to commit to results/compare_smollm2/.  CONFIGS, EXPECT (default gpu),
# LIMIT and SKIP let the same script run at tiny size on a CPU:
#   CONFIGS=configs/smollm2.py:tiny,configs/autorefine.py:smollm2-tiny LIMIT=2 SKIP=rag EXPECT=cpu \
#     launch/compare_gpu.sh /tmp/o
set -uo pipefail
out="${1:?usage: launch/compare_gpu.sh OUT [GGUF]}"
gguf="${2:-}"
configs="${CONFIGS:-configs/smollm2.py,configs/autorefine.py:smollm2,configs/rezero.py:smollm2,configs/rex_rag.py:smollm2,configs/combined.py:smollm2,configs/r3_rag.py:smollm2,configs/ur2.py:smollm2}"
work="${WORKDIR:-runs/compare_gpu}"
mkdir -p "$out"
timeout 120 python -m ragjax.parallel.backend --expect "${EXPECT:-gpu}" | tee "$out/backend.json" \
  || exit 2
args=(--workdir="$work" --configs="$configs" --set=eval.baselines=False --set=progress=False)
[ -d results/compare_smollm2 ] && args+=(--rows_from=results/compare_smollm2)
[ -n "${LIMIT:-}" ] && args+=(--limit="$LIMIT")
[ -n "${SKIP:-}" ] && args+=(--skip="$SKIP")
[ -n "$gguf" ] && args+=(--set=model.checkpoint="$gguf")
judge=""
if [[ "$configs" == *r3_rag* ]]; then   # R3-RAG's judge: SmolLM2 served at judge.url (port 8001)
  [ -z "$gguf" ] && gguf=$(python -c "from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf
print(installed_gguf(*SMOLLM2_135M))")
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 python -m ragjax.services.chat_server --checkpoint "$gguf" \
    --model-name SmolLM2-135M-Instruct --max-new-tokens 64 --port 8001 > "$out/judge.log" 2>&1 &
  judge=$!
  python -c "import time, urllib.request
for _ in range(240):
  try: urllib.request.urlopen('http://127.0.0.1:8001/health', timeout=2); break
  except OSError: time.sleep(1)"
fi
start=$(date +%s)
XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout "${BUDGET_S:-480}" python -m ragjax.compare "${args[@]}" \
  > "$out/compare.log" 2>&1
rc=$?
[ -n "$judge" ] && kill "$judge" 2>/dev/null
echo "{\"rc\": $rc, \"seconds\": $(( $(date +%s) - start ))}" > "$out/status.json"
[ "$rc" -eq 124 ] && echo "stopped at the budget (${BUDGET_S:-480} s); rerun to resume" >&2
[ -d "$work/rows" ] && mkdir -p "$out/rows" && cp "$work"/rows/*.jsonl "$out/rows/" 2>/dev/null
for f in table.md table.json; do [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"; done
for d in "$work"/runs/*/; do      # each run's log tail and per-step metrics
  [ -d "$d" ] || continue
  n=$(basename "$d"); mkdir -p "$out/runs/$n"
  [ -f "$d/train.log" ] && tail -c 20000 "$d/train.log" > "$out/runs/$n/train.log"
  [ -f "$d/rl/metrics.jsonl" ] && cp "$d/rl/metrics.jsonl" "$out/runs/$n/"
done
tail -5 "$out/compare.log"
exit "$rc"
