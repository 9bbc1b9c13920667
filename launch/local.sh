#!/usr/bin/env bash
# Run a ragjax entry point on this machine. Extra arguments go to the module.
#   launch/local.sh ragjax.tools.logit_check --hf_dir /path/to/Qwen2.5-0.5B
set -euo pipefail
module="${1:?usage: launch/local.sh MODULE [ARGS...]}"
shift
exec python -m "$module" "$@"
