"""The GPU check: the existing benchmarks in one command, one JSON line per part, sized for at
most 8 minutes on one H100 (--budget-s caps the whole; not yet run on a GPU).

    python -m ragjax.bench.gpu                  # on a GPU machine (refuses a CPU-only JAX)
    python -m ragjax.bench.gpu --preset tiny    # the same parts at toy sizes, on the CPU

Each part is an existing benchmark (or the backend check) run as its own process, its
command printed in its line, under its own time limit (and the whole under --budget-s):

  device         python -m ragjax.parallel.backend --expect gpu   (backend, devices, versions)
  numerics       python -m ragjax.bench.numerics --preset qwen2.5-0.5b --batch 8 ...
                 float32 logits vs transformers on the GPU, float32 greedy agreement (must be
                 1.0), bf16 logits' relative error vs float32
  sampler        python -m ragjax.bench.sampler --preset qwen2.5-0.5b --batch 128 ...
  train_step     python -m ragjax.bench.train_step --preset qwen2.5-1.5b --seq 2048 --batch 8
                 --remat --scan   (MFU vs the measured matmul peak and the published peak)
  sampler_large  python -m ragjax.bench.sampler --preset qwen2.5-3b --batch 64 ...
  rollout        python -m ragjax.bench.rollout --preset qwen2.5-0.5b --corpus world --batch 32
                 --turns 4 --repeats 1   (engine vs the transformers loop and re-prefill)

`--parts levers` runs the device part and the speed levers of issue 44 instead, each the
baseline part's command with levers turned on (an earlier part, or `sampler_unfused`, is the
reference; about 9 minutes at full size, so give it `--budget-s 540`):

  sampler_unfused  the sampler part with --fused-projections off (the first H100 run's code)
  sampler_levers   the sampler part with --attention-impl cudnn --decode-attention pallas
  train_levers     the train_step part with --remat-policy dots --attention-impl cudnn
  rollout_levers   the rollout part with --attention-impl cudnn --decode-chunk 32
  nucleus          python -m ragjax.bench.nucleus --batch 128   (top-p among 1024 candidates
                   vs the whole vocabulary sorted, at Qwen's 151,936 ids)
(at tiny size on the CPU: XLA's attention for cuDNN's, Pallas in interpret mode).

A line: {"part", "status": ok | failed | timeout | crashed | skipped, "seconds", "limit_s",
"command", the part's headline figures, "result": the benchmark's own JSON line}; the last
line is {"part": "verdict", ...}.  The numerics gates (and the train step's finite loss) make
a part `failed`.  Exit 0: every part ok; 1: a numerics failure; 3: a part timed out, crashed
or was skipped (none failed); 2: no GPU, or a PyTorch without CUDA (one error line).  The
transformers references need PyTorch with CUDA on the GPU machine (`pip install -r
requirements-dev.txt` from PyPI on Linux gets a CUDA build).
`--self-test-perturb E` passes to the numerics part, which must then fail (the test of the
exit code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The whole check's wall-clock budget: under 8 minutes of an H100 for the full sizes.
BUDGET_S = {"full": 470.0, "tiny": 600.0}


def keep(*keys) -> Callable[[dict], dict]:
  """A part's headline figures: these keys of its benchmark's line."""
  return lambda r: {k: r[k] for k in keys if k in r}


def rollout_figures(r: dict) -> dict:
  loops = r.get("loops", {})
  out = {f"{name}_trajectories_per_s": loop["trajectories_per_s"] for name, loop in loops.items()}
  return {**out, **keep("ratio_engine_vs_transformers", "ratio_engine_vs_reprefill",
                        "identical", "dtype")(r)}


@dataclasses.dataclass(frozen=True)
class Part:
  name: str
  argv: tuple[str, ...]                   # after `python -m`
  limit_s: float
  figures: Callable[[dict], dict] = lambda r: {}
  gate: Callable[[dict], list] = lambda r: []     # names of the checks that failed


SAMPLER = keep("dtype", "ragjax_tokens_per_s", "transformers_tokens_per_s", "ratio",
               "decode_step_ms", "roofline_step_ms", "hbm_roofline_fraction",
               "greedy_token_agreement")
TRAIN = keep("dtype", "step_s", "compile_s", "tokens_per_s", "model_tflops_per_s",
             "measured_matmul_peak_tflops", "mfu_vs_measured_peak", "published_peak_tflops",
             "mfu_vs_published_peak", "loss_finite")
NUMERICS = keep("max_abs_logit_diff", "tol", "greedy_agreement", "greedy_token_agreement",
                "near_ties", "bf16_rel_error", "transformers_bf16_rel_error", "ok")


def numerics_gate(r: dict) -> list:
  return list(r.get("failed", [])) if "ok" in r else ["numerics: no verdict"]


def train_gate(r: dict) -> list:
  return [] if r.get("loss_finite") else ["train_step: non-finite loss"]


def lever_parts(preset: str) -> list[Part]:
  """The speed levers (issue 44), each a check part's command with levers on."""
  if preset == "tiny":
    attn = "xla"
    sampler = ("ragjax.bench.sampler", "--preset", "tiny", "--batch", "2", "--prompt-len", "8",
               "--new-tokens", "8", "--repeats", "1", "--skip-hf")
    train = ("ragjax.bench.train_step", "--preset", "tiny", "--seq", "32", "--batch", "2",
             "--steps", "1", "--remat", "--scan")
    rollout = ("ragjax.bench.rollout", "--preset", "test", "--corpus", "world", "--turns", "1",
               "--batch", "2", "--repeats", "1", "--think-tokens", "4", "--query-words", "2",
               "--doc-tokens", "20", "--vocab", "1024", "--skip-hf")
    limits, chunk = (120, 120, 120, 180), "4"
    nucleus = ("ragjax.bench.nucleus", "--batch", "4", "--vocab", "256", "--candidates", "16",
               "--repeats", "1")
  else:
    attn = "cudnn"
    sampler = ("ragjax.bench.sampler", "--preset", "qwen2.5-0.5b", "--batch", "128",
               "--prompt-len", "128", "--new-tokens", "128", "--skip-hf")
    train = ("ragjax.bench.train_step", "--preset", "qwen2.5-1.5b", "--seq", "2048", "--batch",
             "8", "--remat", "--scan")
    rollout = ("ragjax.bench.rollout", "--preset", "qwen2.5-0.5b", "--corpus", "world",
               "--batch", "32", "--turns", "4", "--repeats", "1", "--skip-hf")
    limits, chunk = (75, 100, 150, 180), "32"
    nucleus = ("ragjax.bench.nucleus", "--batch", "128", "--repeats", "10")
  return [
      Part("sampler_unfused", (*sampler, "--fused-projections", "off"), limits[0], SAMPLER),
      Part("sampler_levers", (*sampler, "--attention-impl", attn, "--decode-attention",
                              "pallas"), limits[1], SAMPLER),
      Part("train_levers", (*train, "--remat-policy", "dots", "--attention-impl", attn),
           limits[2], TRAIN, train_gate),
      Part("rollout_levers", (*rollout, "--attention-impl", attn, "--decode-chunk", chunk),
           limits[3], rollout_figures),
      Part("nucleus", nucleus, 60, keep("peaked", "flat"),
           lambda r: [] if r["peaked"]["same_tokens"] and r["flat"]["same_tokens"]
           else ["nucleus: the candidates and the full sort drew different tokens"]),
  ]


def parts(preset: str, perturb: float) -> list[Part]:
  """The parts of the check at `preset` (full: the H100 sizes; tiny: seconds on a CPU)."""
  numerics_extra = ("--self-test-perturb", str(perturb)) if perturb else ()
  if preset == "tiny":
    return [
        Part("device", ("ragjax.parallel.backend",), 60, keep("backend", "devices",
                                                              "device_kind", "jax")),
        Part("numerics", ("ragjax.bench.numerics", "--preset", "tiny", "--batch", "2",
                          "--prompt-len", "8", "--new-tokens", "8", *numerics_extra), 120,
             NUMERICS, numerics_gate),
        Part("sampler", ("ragjax.bench.sampler", "--preset", "tiny", "--batch", "2",
                         "--prompt-len", "8", "--new-tokens", "8", "--repeats", "1"), 120,
             SAMPLER),
        Part("train_step", ("ragjax.bench.train_step", "--preset", "tiny", "--seq", "32",
                            "--batch", "2", "--steps", "1"), 120, TRAIN, train_gate),
        Part("sampler_large", ("ragjax.bench.sampler", "--preset", "tiny", "--batch", "4",
                               "--prompt-len", "8", "--new-tokens", "4", "--repeats", "1",
                               "--skip-hf"), 120, SAMPLER),
        Part("rollout", ("ragjax.bench.rollout", "--preset", "test", "--corpus", "world",
                         "--turns", "1", "--batch", "2", "--repeats", "1", "--think-tokens",
                         "4", "--query-words", "2", "--doc-tokens", "20", "--vocab", "1024",
                         "--torch-threads", "1"), 180, rollout_figures),
    ]
  threads = str(min(os.cpu_count() or 1, 16))
  return [
      Part("device", ("ragjax.parallel.backend", "--expect", "gpu"), 60,
           keep("backend", "devices", "device_kind", "jax", "plugins")),
      Part("numerics", ("ragjax.bench.numerics", "--preset", "qwen2.5-0.5b", "--batch", "8",
                        "--prompt-len", "128", "--new-tokens", "32", *numerics_extra), 90,
           NUMERICS, numerics_gate),
      Part("sampler", ("ragjax.bench.sampler", "--preset", "qwen2.5-0.5b", "--batch", "128",
                       "--prompt-len", "128", "--new-tokens", "128"), 90, SAMPLER),
      Part("train_step", ("ragjax.bench.train_step", "--preset", "qwen2.5-1.5b", "--seq",
                          "2048", "--batch", "8", "--remat", "--scan"), 150, TRAIN, train_gate),
      Part("sampler_large", ("ragjax.bench.sampler", "--preset", "qwen2.5-3b", "--batch", "64",
                             "--prompt-len", "128", "--new-tokens", "128"), 120, SAMPLER),
      Part("rollout", ("ragjax.bench.rollout", "--preset", "qwen2.5-0.5b", "--corpus", "world",
                       "--batch", "32", "--turns", "4", "--repeats", "1", "--torch-threads",
                       threads), 240, rollout_figures),
  ]


def last_json(text: str):
  for line in reversed(text.strip().splitlines()):
    try:
      value = json.loads(line)
    except ValueError:
      continue
    if isinstance(value, dict):
      return value
  return None


def run_part(part: Part, limit: float) -> dict:
  """Runs one part as a process (its own session, killed whole at the limit)."""
  cmd = [sys.executable, "-m", *part.argv]
  line = {"part": part.name, "command": "python -m " + " ".join(part.argv),
          "limit_s": round(limit)}
  t0 = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=limit)
    status = None
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, err = proc.communicate()
    status = "timeout"
  line["seconds"] = round(time.perf_counter() - t0, 1)
  result = last_json(out)
  if status is None:
    failed = part.gate(result) if result is not None else []
    status = ("crashed" if result is None or (proc.returncode not in (0, 1))
              else "failed" if failed or proc.returncode == 1 else "ok")
    if failed:
      line["failed"] = failed
  line["status"] = status
  line["returncode"] = proc.returncode
  if result is not None:
    line.update(part.figures(result))
    line["result"] = result
  if status != "ok":
    line["stderr_tail"] = err.strip().splitlines()[-6:]
  return line


def torch_build() -> dict:
  """The PyTorch the transformers references run on (its CUDA version; None: CPU-only)."""
  try:
    import torch
  except ImportError:
    return {"torch": None, "torch_cuda": None}
  return {"torch": torch.__version__, "torch_cuda": torch.version.cuda or getattr(torch.version, "hip", None)}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", choices=("full", "tiny"), default="full",
                  help="full: the H100 sizes (needs a GPU); tiny: toy sizes, CPU, seconds")
  ap.add_argument("--parts", default="",
                  help="comma list of parts to run, in that order (default: the check's "
                       "parts; `levers`: the device part and the speed levers)")
  ap.add_argument("--budget-s", type=float, default=None,
                  help=f"wall-clock budget of the whole check (default {BUDGET_S})")
  ap.add_argument("--self-test-perturb", type=float, default=0.0,
                  help="perturb ragjax's weights in the numerics part (it must then fail)")
  args = ap.parse_args(argv)
  todo = parts(args.preset, args.self_test_perturb)
  levers = lever_parts(args.preset)
  if args.parts:
    names = []
    for n in (n.strip() for n in args.parts.split(",") if n.strip()):
      names += ["device"] + [p.name for p in levers] if n == "levers" else [n]
    every = {p.name: p for p in todo + levers}
    unknown = sorted(set(names) - set(every))
    if unknown:
      ap.error(f"--parts: unknown {unknown}; the parts are {list(every)} and `levers`")
    todo = [every[n] for n in dict.fromkeys(names)]                 # in the order given
  torch = torch_build()
  if args.preset == "full":
    # before any part starts: a CPU-only JAX (or a PyTorch without CUDA, whose transformers
    # references would run on the CPU) stops here in one line; this process never starts
    # JAX's backend or CUDA, so the parts get the whole GPU
    from ragjax.parallel.backend import BackendError, Expectation, check_installed
    try:
      check_installed(Expectation("gpu", "python -m ragjax.bench.gpu"))
      if not torch["torch_cuda"]:
        raise BackendError(f"PyTorch {torch['torch']} has no CUDA: the check's transformers "
                           "references would run on the CPU; install a CUDA build of torch "
                           "(PyPI's Linux wheel is one)")
    except BackendError as e:
      print(f"ragjax.bench.gpu: error: {e}", file=sys.stderr)
      return 2
  budget = args.budget_s or BUDGET_S[args.preset]
  t0, lines = time.perf_counter(), []
  for part in todo:
    left = budget - (time.perf_counter() - t0)
    if left < 5:
      line = {"part": part.name, "status": "skipped", "reason": "budget spent",
              "command": "python -m " + " ".join(part.argv)}
    else:
      line = run_part(part, min(part.limit_s, left))
    if part.name == "device":
      line.update(torch)
    print(json.dumps(line), flush=True)
    lines.append(line)
    if part.name == "device" and line["status"] != "ok":
      for err in line.get("stderr_tail", [])[-1:]:
        print(err, file=sys.stderr)
      return 2
  statuses = [l["status"] for l in lines]
  code = 1 if "failed" in statuses else 0 if set(statuses) <= {"ok"} else 3
  print(json.dumps({"part": "verdict", "preset": args.preset, "exit": code,
                    "seconds": round(time.perf_counter() - t0, 1),
                    "statuses": {l["part"]: l["status"] for l in lines}}), flush=True)
  return code


if __name__ == "__main__":
  sys.exit(main())
