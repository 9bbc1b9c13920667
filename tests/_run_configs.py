"""Several configs run one after another in one process, as `python -m ragjax.train` runs one
(the recipe's `run`), so they share the model file's parse and the compiled sampler and update:

    python tests/_run_configs.py PLAN.json [GIN_FILE ...]

PLAN: [{"config": "FILE.py:ARG", "workdir": DIR, "overrides": ["FIELD=VALUE", ...],
"cold_start_from": DIR or null, "damage": [PATH, ...]}, or {"shorten": CHECKPOINT, "layers": K,
"out": DIR}, ...]; a `shorten` step writes CHECKPOINT's first K layers (its embeddings, final
norm, tokenizer and chat template, the layers' real weights) as an HF directory, a model the
later runs can name as `model.checkpoint`: the real model's text in and out at a fraction of
its compute, for the tests of what a method's protocol does around it; `cold_start_from` links that
run's cached cold start into this one's workdir first (reused only when its cold-start fields
are the same: the qa recipe checks them); `damage` copies each file to PATH.before and then
cuts it mid-character (a write killed half-way), for a test of the rerun that must set it
aside.  GIN_FILEs bind user components for every run, as `--gin_file` does.  Prints
`=== RUN i WORKDIR` before run i and one JSON line after it: {"workdir", "seconds"}."""

import dataclasses
import json
import os
import shutil
import sys
import time

import jax
from absl import flags

from ragjax import train
from ragjax.models.hf_io import load_decoder, load_tokenizer, save_decoder
from ragjax.recipes.cached_phase import COLD_START_DIR
from ragjax.wiring.config_files import apply_overrides, load_config

CUT = b'{"key": "\xff'     # a JSON cache file cut inside a UTF-8 character


def main(plan_path, gin_files=()):
  flags.FLAGS(["_run_configs", *(f"--gin_file={g}" for g in gin_files)])
  with open(plan_path) as f:
    plan = json.load(f)
  for i, run in enumerate(plan):
    if "shorten" in run:
      shorten(run["shorten"], run["layers"], run["out"])
      continue
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


def shorten(checkpoint: str, layers: int, out: str) -> None:
  """`checkpoint`'s first `layers` layers saved as an HF directory at `out`."""
  cfg, params = load_decoder(checkpoint, dtype="float32", param_dtype="float32",
                             scan_layers=True)
  params = {**params, "layers": jax.tree.map(lambda x: x[:layers], params["layers"])}
  save_decoder(out, dataclasses.replace(cfg, num_layers=layers), params,
               tokenizer=load_tokenizer(checkpoint))


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
