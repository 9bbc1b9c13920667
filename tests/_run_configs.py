"""Several configs run one after another in one process, as `python -m ragjax.train` runs one
(the recipe's `run`), so they share the model file's parse and the compiled sampler and update:

    python tests/_run_configs.py PLAN.json

PLAN: [{"config": "FILE.py:ARG", "workdir": DIR, "overrides": ["FIELD=VALUE", ...],
"cold_start_from": DIR or null}, ...]; `cold_start_from` links that run's cached cold start
into this one's workdir first (reused only when its cold-start fields are the same: the qa
recipe checks them).  Prints one JSON line per run: {"workdir", "seconds"}."""

import json
import os
import sys
import time

from ragjax import train
from ragjax.recipes.cached_phase import COLD_START_DIR
from ragjax.wiring.config_files import apply_overrides, load_config


def main(plan_path):
  with open(plan_path) as f:
    plan = json.load(f)
  for run in plan:
    c = apply_overrides(load_config(run["config"]),
                        [*run.get("overrides", ()), f"workdir={run['workdir']}"])
    if run.get("cold_start_from"):
      os.makedirs(run["workdir"], exist_ok=True)
      link = os.path.join(run["workdir"], COLD_START_DIR)
      if not os.path.lexists(link):
        os.symlink(os.path.join(run["cold_start_from"], COLD_START_DIR), link)
    t0 = time.perf_counter()
    train.run(c)
    print(json.dumps({"workdir": run["workdir"], "seconds": round(time.perf_counter() - t0, 1)}),
          flush=True)


if __name__ == "__main__":
  main(sys.argv[1])
