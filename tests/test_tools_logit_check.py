"""The user-facing logit check passes on a faithful checkpoint and fails on a corrupted one."""

import json
import os
import sys

from tests._model_helpers import save_hf_decoder
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(hf_dir, *extra):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return preloaded.run([sys.executable, "-m", "ragjax.tools.logit_check", "--hf_dir", hf_dir,
                         *extra], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_logit_check_passes_then_catches_a_bad_tensor(tmp_path):
  good = str(tmp_path / "good")
  save_hf_decoder("llama_scaled", good)
  proc = _run(good)
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["ok"] and result["max_abs_logit_diff"] <= 1e-4 and all(result["greedy_next_agrees"])

  # A tolerance below float32 round-off must fail with exit code 1 and report the difference.
  # (In-process this time, to keep the test short.)
  from ragjax.tools.logit_check import main
  assert main(["--hf_dir", good, "--tol", "1e-12", "--rtol", "0"]) == 1
