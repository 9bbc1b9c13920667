"""Several configs run one after another in one process, as `python -m ragjax.train` runs one
(the recipe's `run`), so they share the model file's parse and the compiled sampler and update:

    python tests/_run_configs.py PLAN.json [GIN_FILE ...]

PLAN: [{"config": "FILE.py:ARG", "workdir": DIR, "overrides": ["FIELD=VALUE", ...],
"cold_start_from": DIR or null, "damage": [PATH, ...]}, ...]; `cold_start_from` links that
run's cached cold start into this one's workdir first (reused only when its cold-start fields
are the same: the qa recipe checks them); `damage` copies each file to PATH.before and then
cuts it mid-character (a write killed half-way), for a test of the rerun that must set it
aside.  GIN_FILEs bind user components for every run, as `--gin_file` does.  Prints
`=== RUN i WORKDIR` before run i and one JSON line after it: {"workdir", "seconds"}."""

import json
import os
import shutil
import sys
import time

from absl import flags

from ragjax import train
from ragjax.recipes.cached_phase import COLD_START_DIR
from ragjax.wiring.config_files import apply_overrides, load_config

CUT = b'{"key": "\xff'     # a JSON cache file cut inside a UTF-8 character


def main(plan_path, gin_files=()):
  flags.FLAGS(["_run_configs", *(f"--gin_file={g}" for g in gin_files)])
  with open(plan_path) as f:
    plan = json.load(f)
  for i, run in enumerate(plan):
    c = apply_overrides(load_config(run["config"]),
                        [*run.get("overrides", ()), f"workdir={run['workdir']}"])
    if run.get("cold_start_from"):
      os.makedirs(run["workdir"], exist_ok=True)
      link = os.path.join(run["workdir"], COLD_START_DIR)
      if not os.path.lexists(link):
        os.symlink(os.path.join(run["cold_start_from"], COLD_START_DIR), link)
    for path in run.get("damage", ()):
      shutil.copy(path, path + ".before")
      with open(path, "wb") as f:
        f.write(CUT)
    print(f"=== RUN {i} {run['workdir']}", flush=True)
    t0 = time.perf_counter()
    train.run(c)
    print(json.dumps({"workdir": run["workdir"], "seconds": round(time.perf_counter() - t0, 1)}),
          flush=True)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
