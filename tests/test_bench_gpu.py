"""The GPU check (`python -m ragjax.bench.gpu`) in its tiny form on the CPU: one JSON line per
part, the float32 numerics against transformers pass (greedy agreement 1.0), a numerics
failure (weights perturbed on purpose) exits non-zero, and a CPU-only JAX asked for the full
check stops in one line."""

import json
import os
import sys

import numpy as np
import pytest

from ragjax.bench import gpu
from ragjax.bench.numerics import greedy_agreement
from ragjax.parallel import backend
from _xla_helpers import xla_flags
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check(*args):
  # one CPU device: the benchmarks' own shapes (the suite's 8 fake devices would shard them)
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
             XLA_FLAGS=xla_flags())
  env.pop(backend.EXPECT_ENV, None)
  p = preloaded.run([sys.executable, "-m", "ragjax.bench.gpu", *args], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=600)
  return p, [json.loads(line) for line in p.stdout.splitlines()]


def test_tiny_check_one_line_per_part_and_a_numerics_failure_exits_non_zero():
  """The parts run with ragjax's weights perturbed in the numerics part (its self-test): that
  part fails, the others pass, the command exits 1."""
  p, lines = check("--preset", "tiny", "--parts", "device,numerics,sampler,train_step",
                   "--self-test-perturb", "0.05")
  assert p.returncode == 1, p.stderr[-2000:]
  assert [l["part"] for l in lines] == ["device", "numerics", "sampler", "train_step", "verdict"]
  for line in lines[:-1]:
    assert line["command"].startswith("python -m ragjax.") and line["seconds"] > 0
    assert isinstance(line["result"], dict) and line["limit_s"] > 0
  device, numerics, sampler, train, verdict = lines
  assert device["backend"] == "cpu" and device["result"]["devices"] == 1
  assert numerics["status"] == "failed" and numerics["returncode"] == 1
  assert "float32_logits" in numerics["failed"] and numerics["result"]["ok"] is False
  assert numerics["max_abs_logit_diff"] > numerics["tol"]
  assert sampler["ragjax_tokens_per_s"] > 0 and sampler["transformers_tokens_per_s"] > 0
  assert sampler["ratio"] > 0 and sampler["result"]["bench"] == "sampler"
  assert train["loss_finite"] is True and 0 < train["mfu_vs_measured_peak"]
  assert verdict["exit"] == 1 and verdict["statuses"] == {
      "device": "ok", "numerics": "failed", "sampler": "ok", "train_step": "ok"}
  p, lines = check("--preset", "tiny", "--parts", "device")
  assert p.returncode == 0 and lines[-1]["exit"] == 0


def test_float32_numerics_agree_with_transformers_on_cpu(capsys):
  """The numerics part unperturbed (in this process): float32 logits within the tolerance,
  greedy agreement 1.0 with no near-tie needed, bf16 close to float32."""
  from ragjax.bench import numerics
  assert numerics.main(["--preset", "tiny", "--batch", "2", "--prompt-len", "8",
                        "--new-tokens", "8"]) == 0
  r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert r["ok"] and r["failed"] == [] and r["torch_device"] == "cpu"
  assert r["greedy_agreement"] == r["greedy_token_agreement"] == 1.0 and r["near_ties"] == 0
  assert r["max_abs_logit_diff"] <= r["tol"] == 1e-3
  assert 0 < r["bf16_rel_error"] <= r["bf16_tol"]         # bf16 differs, but not by much


@pytest.mark.skipif(bool(backend.installed_plugins("gpu")), reason="a GPU plug-in is installed")
def test_full_check_refuses_a_cpu_only_jax_in_one_line():
  p, lines = check()
  assert p.returncode == 2 and lines == []
  (line,) = p.stderr.strip().splitlines()
  assert line.startswith("ragjax.bench.gpu: error: python -m ragjax.bench.gpu needs a GPU")
  assert "`pip install -e .[cuda12]`" in line


def test_full_check_runs_the_issue_sizes_within_the_budget():
  full, tiny = gpu.parts("full", 0.0), gpu.parts("tiny", 0.0)
  assert [p.name for p in full] == [p.name for p in tiny]
  cmd = {p.name: " ".join(p.argv) for p in full}
  assert cmd["device"] == "ragjax.parallel.backend --expect gpu"
  assert "--preset qwen2.5-0.5b --batch 8" in cmd["numerics"]
  assert "--preset qwen2.5-0.5b --batch 128" in cmd["sampler"]
  assert "--preset qwen2.5-3b --batch 64" in cmd["sampler_large"]
  assert "--preset qwen2.5-1.5b --seq 2048 --batch 8 --remat --scan" in cmd["train_step"]
  assert "--preset qwen2.5-0.5b --corpus world --batch 32 --turns 4" in cmd["rollout"]
  assert gpu.BUDGET_S["full"] <= 8 * 60
  perturbed = {p.name: p.argv for p in gpu.parts("full", 0.1)}
  assert perturbed["numerics"][-2:] == ("--self-test-perturb", "0.1")


def test_tiny_levers_turn_each_lever_on():
  """`--parts levers` at tiny size on the CPU: the device part, then each lever part runs with
  its levers on (XLA's attention for cuDNN's, Pallas in interpret mode), and the rollout with
  retrieval overlapped keeps the re-prefill loop's tokens."""
  p, lines = check("--preset", "tiny", "--parts", "levers")
  assert p.returncode == 0, p.stderr[-2000:]
  by = {l["part"]: l for l in lines}
  assert list(by) == ["device", "sampler_unfused", "sampler_levers", "train_levers",
                      "rollout_levers", "nucleus", "verdict"]
  assert by["nucleus"]["peaked"]["same_tokens"] and by["nucleus"]["status"] == "ok"
  assert by["sampler_unfused"]["result"]["fused_projections"] is False
  lev = by["sampler_levers"]["result"]
  assert lev["decode_attention"] == "pallas" and lev["attention_impl"] == "xla"
  assert lev["ragjax_tokens_per_s"] > 0
  train = by["train_levers"]
  assert train["result"]["remat_policy"] == "dots" and train["loss_finite"] is True
  roll = by["rollout_levers"]["result"]
  assert roll["decode_chunk"] == 4 and roll["attention_impl"] == "xla" and roll["identical"]
  full = {p.name: " ".join(p.argv) for p in gpu.lever_parts("full")}
  assert "--attention-impl cudnn --decode-attention pallas" in full["sampler_levers"]
  assert "--remat --scan --remat-policy dots --attention-impl cudnn" in full["train_levers"]
  assert "--attention-impl cudnn --decode-chunk 32" in full["rollout_levers"]
  base = {p.name: " ".join(p.argv) for p in gpu.parts("full", 0.0)}
  assert full["sampler_unfused"].startswith(base["sampler"])   # the check's part, levers added
  assert full["train_levers"].startswith(base["train_step"])


def test_parts_run_in_the_order_given_and_the_budget_skips_the_rest():
  p, lines = check("--preset", "tiny", "--budget-s", "4", "--parts", "train_levers,sampler,levers")
  assert [(l["part"], l["status"]) for l in lines][:3] == [
      ("train_levers", "skipped"), ("sampler", "skipped"), ("device", "skipped")]
  assert p.returncode == 2                  # the device part did not pass: nothing after it


def test_a_part_that_hangs_or_crashes_is_reported():
  hang = gpu.run_part(gpu.Part("hang", ("http.server", "--bind", "127.0.0.1", "0"), 1), 1)
  assert hang["status"] == "timeout" and "result" not in hang
  crash = gpu.run_part(gpu.Part("crash", ("ragjax.no_such_module",), 60), 60)
  assert crash["status"] == "crashed" and crash["returncode"] == 1
  assert any("No module named" in l for l in crash["stderr_tail"])


def test_greedy_agreement_allows_a_first_difference_only_at_a_near_tie():
  ref = np.array([[1, 2, 3, 4], [1, 2, 3, 4]])
  ours = np.array([[1, 2, 3, 4], [1, 2, 0, 0]])        # row 1 differs from position 2 on
  logits = np.zeros((4, 2, 5), np.float32)
  logits[2, 1, 3], logits[2, 1, 0] = 1.0, 1.0 - 1e-4   # transformers: token 3 over 0 by 1e-4
  tie = greedy_agreement(ours, ref, logits, tie=2e-3)
  assert tie["greedy_agreement"] == 1.0 and tie["near_ties"] == 1
  assert tie["greedy_token_agreement"] == 0.75 and tie["greedy_rows_identical"] == 0.5
  assert tie["first_differences"] == [{"row": 1, "position": 2, "margin": 1e-4}]
  logits[2, 1, 0] = 0.5                                # a decisive margin: a real difference
  real = greedy_agreement(ours, ref, logits, tie=2e-3)
  assert real["greedy_agreement"] == 0.75 and real["near_ties"] == 0
