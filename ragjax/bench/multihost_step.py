"""N JAX processes vs 1 on the same global batch: RL step time (issue 22's benchmark).

    python -m ragjax.bench.multihost_step [--config configs/search_r1.py:tiny] [--steps 6] \
        [--processes 2] [-- --config.trainer.batch_prompts=4 ...]

Runs the same training command twice with `launch/local.sh`: 1 process with N CPU devices, and
N processes (`jax.distributed` on 127.0.0.1, gloo collectives) with 1 device each, so the
global batch, the mesh and the losses are the same (tests/test_multihost.py checks the losses).
The step's prompts must split into whole groups over the N processes (4 processes: pass
`-- --config.trainer.batch_prompts=4` or a multiple).
Reports, per layout, the median step time and its rollout / update split over the steps after
the first (which compiles), and the ratio.  On one machine the two processes share its cores,
so the ratio measures what multi-controller coordination costs (each process rolls out half the
prompts, then the update's arrays are assembled across processes), not a speed-up.  Extra
arguments after `--` go to the training command.  One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from ragjax.bench.serving import REPO, child_env


def run_layout(config: str, steps: int, processes: int, devices: int, workdir: str, extra) -> dict:
  env = child_env()
  env.update(NUM_PROCESSES=str(processes), LOG_DIR=os.path.join(workdir, "logs"),
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  cmd = ["bash", os.path.join(REPO, "launch", "local.sh"), "ragjax.train", f"--config={config}",
         f"--config.workdir={workdir}", "--config.progress=False",
         f"--config.trainer.num_steps={steps}", "--config.trainer.eval_every=0", *extra]
  out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
  if out.returncode != 0:
    raise RuntimeError(f"{processes} process(es) failed: {out.stderr[-2000:]}")
  with open(os.path.join(workdir, "rl", "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()][1:]      # step 1 compiles
  med = lambda k: round(float(np.median([r[k] for r in rows])), 3)   # noqa: E731
  return {"processes": processes, "devices_per_process": devices,
          "step_s": med("time/step_s"), "rollout_s": med("time/rollout_s"),
          "update_s": med("time/update_s"), "steps_timed": len(rows),
          "loss_last": rows[-1]["loss"]}


def main(argv=None) -> dict:
  argv = list(sys.argv[1:] if argv is None else argv)
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", default="configs/search_r1.py:tiny")
  ap.add_argument("--steps", type=int, default=6)
  ap.add_argument("--processes", type=int, default=2)
  a = ap.parse_args(argv)
  if a.processes < 2:
    ap.error("--processes must be >= 2")
  n = a.processes
  with tempfile.TemporaryDirectory(prefix="ragjax_bench_multihost_") as tmp:
    one = run_layout(a.config, a.steps, 1, n, os.path.join(tmp, "one"), extra)
    many = run_layout(a.config, a.steps, n, 1, os.path.join(tmp, "many"), extra)
  out = {"bench": "multihost_step", "config": a.config, "one_process": one,
         "processes": many, "many_over_one_step_time": round(many["step_s"] / one["step_s"], 3),
         "same_last_loss": abs(one["loss_last"] - many["loss_last"])
         <= 2e-4 * abs(one["loss_last"]) + 1e-6, "load_avg_1min": round(os.getloadavg()[0], 2)}
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
