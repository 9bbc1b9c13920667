"""`python -m ragjax.tools.kill_resume --config=configs/X.py:tiny [--kills 3] [--seed 0]`:
kill a training run at random moments and check that resuming loses nothing.

1. The reference: `python -m ragjax.train --config=... --config.workdir=W0`, uninterrupted.
2. For each kill: the same command in a fresh workdir is SIGKILLed after a random fraction of
   the reference's wall time (of the last attempt's, if a run finishes before its kill time:
   then it is tried again in a fresh workdir), in whatever it is doing then (building the world or the index,
   the cold start, a rollout, an update, a checkpoint save, the evaluation), then the same
   command is run again to the end.
3. The resumed run must log the reference's RL metrics (timings aside) and export the
   reference's policy, bit for bit.

Extra arguments after `--` go to every `ragjax.train` command (e.g. a `--gin_file`).  Prints
one JSON line per kill (where it fell, the checks) and a summary line; exits 1 if any kill
lost or changed anything.  The processes run on the CPU with this checkout on their path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from ragjax.bench.serving import child_env

VOLATILE = ("time/", "tokens_per_s", "step_retries")


def train_cmd(config: str, workdir: str, extra) -> list:
  return [sys.executable, "-m", "ragjax.train", f"--config={config}",
          f"--config.workdir={workdir}", "--config.progress=False", *extra]


def metrics(workdir: str) -> list:
  path = os.path.join(workdir, "rl", "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def policy_digest(workdir: str) -> str:
  """sha256 of the exported policy's weight files (empty if none)."""
  h = hashlib.sha256()
  d = os.path.join(workdir, "policy")
  if not os.path.isdir(d):
    return ""
  for name in sorted(os.listdir(d)):
    if name.endswith(".safetensors"):
      with open(os.path.join(d, name), "rb") as f:
        h.update(f.read())
  return h.hexdigest()


def run(cmd, log_path: str, timeout: float) -> tuple[int, float]:
  t0 = time.perf_counter()
  with open(log_path, "ab") as log:
    rc = subprocess.run(cmd, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                        timeout=timeout).returncode
  return rc, time.perf_counter() - t0


def killed_then_resumed(cmd_of, workdir: str, after: float, timeout: float) -> dict:
  """Starts the run and SIGKILLs it after `after` seconds, then runs it again to the end.  A
  run that finishes first is not a kill: {"killed": False, "took_s": its time}."""
  os.makedirs(workdir, exist_ok=True)
  log_path = os.path.join(workdir, "kill_resume.log")
  t0 = time.perf_counter()
  with open(log_path, "ab") as log:
    proc = subprocess.Popen(cmd_of(workdir), env=child_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
      proc.wait(timeout=after)
      return {"killed": False, "took_s": time.perf_counter() - t0}
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
  steps_at_kill = len(metrics(workdir))
  rc, _ = run(cmd_of(workdir), log_path, timeout)
  return {"killed": True, "rl_steps_logged_at_kill": steps_at_kill, "resume_rc": rc}


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", required=True, help="FILE[:ARG], e.g. configs/search_r1.py:tiny")
  ap.add_argument("--kills", type=int, default=3)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--workdir", default=None, help="where the runs go (default: a temp dir)")
  ap.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
  a = ap.parse_args(argv)
  root = a.workdir or tempfile.mkdtemp(prefix="ragjax_kill_resume_")
  cmd_of = lambda w: train_cmd(a.config, w, extra)  # noqa: E731
  ref_dir = os.path.join(root, "reference")
  os.makedirs(ref_dir, exist_ok=True)
  rc, wall = run(cmd_of(ref_dir), os.path.join(ref_dir, "kill_resume.log"), a.timeout)
  if rc != 0:
    print(json.dumps({"error": f"the reference run exited {rc}; see "
                               f"{os.path.join(ref_dir, 'kill_resume.log')}"}))
    return 2
  ref_metrics, ref_policy = metrics(ref_dir), policy_digest(ref_dir)
  rng = random.Random(a.seed)
  survived = 0
  for i in range(a.kills):
    estimate = wall                         # the machine's load changes how long a run takes
    for attempt in range(4):
      got = os.path.join(root, f"kill{i}" + (f"_{attempt}" if attempt else ""))
      after = rng.uniform(0.05, 0.95) * estimate
      out = killed_then_resumed(cmd_of, got, after, a.timeout)
      if out["killed"]:
        break
      estimate = out["took_s"]                # it finished first: aim inside that duration
    if not out["killed"]:
      raise RuntimeError(f"kill {i}: the run finished before every kill time; see {got}")
    out.update(kill=i, attempts=attempt + 1, after_s=round(after, 1), of_s=round(estimate, 1),
               same_metrics=metrics(got) == ref_metrics,
               same_policy=policy_digest(got) == ref_policy and bool(ref_policy))
    ok = out["resume_rc"] == 0 and out["same_metrics"] and out["same_policy"]
    survived += ok
    print(json.dumps(out), flush=True)
  print(json.dumps({"config": a.config, "kills": a.kills, "survived": survived,
                    "reference_s": round(wall, 1), "rl_steps": len(ref_metrics),
                    "workdir": root}), flush=True)
  return 0 if survived == a.kills else 1


if __name__ == "__main__":
  sys.exit(main())
