"""The cold-start SFT step at a config's shape, on the config's own scripted traces: step time,
tokens/s and model FLOP/s against the matmul peak measured in the same run.

    python -m ragjax.bench.sft_step                          # configs/world.py
    python -m ragjax.bench.sft_step --config configs/world.py:toy --steps 2 --traces 32

The world, tokenizer, index, policy and traces are built as `python -m ragjax.train` builds
them (`ragjax.recipes.world.scripted_traces` through the real engine and retriever, on the
first `--traces` training questions).  For each width bucket the traces fall in, one batch of
`sft.batch_size` of them is padded to the width and `--steps` SFT updates are timed after the
compiling one (median), with the loss `run_sft` uses (`sft.gather`, `sft.context_weight`).
The summary weights each width by its share of the traces, as `run_sft` draws them.

Model FLOPs follow `ragjax.bench.train_step.model_flops_per_token` over the padded batch, with
the unembedding counted at every position when the context loss is on and at the trained
positions otherwise (gathered).  Two references are timed in the same run: the square float32
matmul (`measured_matmul_peak`, 1024 on CPU) and the policy's own widest matmul at the batch's
token count (tokens x hidden x intermediate), which is what the step's matmuls can reach at
these shapes.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.bench.train_step import measured_matmul_peak, model_flops_per_token
from ragjax.wiring import components as parts
from ragjax.recipes import world as world_recipe
from ragjax.wiring.config_files import apply_overrides, load_config
from ragjax.rl.run_config import OptimConfig
from ragjax.rl.optim import make_optimizer
from ragjax.rl.sft import SFTConfig, make_sft_batch, sft_loss_fn
from ragjax.rl.train_step import init_train_state, jit_update, make_update, place_train_state
from ragjax.rollout.factory import make_engine
from ragjax.rl.masks import loss_mask
from ragjax.rollout.labels import LABEL_DTYPE, Source
from ragjax.rollout.trajectory import pad_rows
from ragjax.parallel.buckets import pick_bucket
from ragjax.typed_config import from_dict

DEFAULT_CONFIG = "configs/world.py"


def sft_flops(cfg, width: int, rows: int, trained: int, context: bool) -> float:
  """Model FLOPs of one SFT update on `rows` rows padded to `width` (module docstring):
  the unembedding runs at every position with the context loss, else at `trained` ones."""
  flops = model_flops_per_token(cfg, width) * rows * width
  if not context:
    flops -= 6.0 * cfg.vocab_size * cfg.hidden_size * (rows * width - trained)
  return flops


def matmul_rate(m: int, k: int, n: int, reps: int = 10) -> float:
  """FLOP/s of an [m, k] x [k, n] float32 product (best of 3 after a warm-up)."""
  a = jax.random.normal(jax.random.PRNGKey(1), (m, k), jnp.float32)
  b = jax.random.normal(jax.random.PRNGKey(2), (k, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  best = float("inf")
  for _ in range(3):
    t0 = time.perf_counter()
    jax.block_until_ready([f(a, b) for _ in range(reps)])
    best = min(best, time.perf_counter() - t0)
  return 2.0 * m * k * n * reps / best


def time_width(cfg, state, update_of, rows_t, rows_l, idx, width, sft, steps):
  """(state, compile s, median step s, trained tokens) of `steps` updates on one padded
  batch of `sft.batch_size` traces drawn in turn from `idx`."""
  pick = [idx[i % len(idx)] for i in range(sft.batch_size)]
  tokens = pad_rows([rows_t[i] for i in pick], width, 0, np.int32)
  labels = pad_rows([rows_l[i] for i in pick], width, Source.PAD, LABEL_DTYPE)
  batch = make_sft_batch(tokens, labels, gather=sft.gather, context=sft.context_weight > 0)
  step = update_of(batch)
  t0 = time.perf_counter()
  state, m = step(state, batch)
  jax.block_until_ready(m)
  compile_s = time.perf_counter() - t0
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t0)
  return state, compile_s, statistics.median(times), int(loss_mask(labels).sum())


def bench(spec: str, overrides, *, steps: int, traces: int, workdir: str) -> dict:
  c = apply_overrides(load_config(spec), overrides)
  c.workdir, c.progress = workdir, False
  if c.recipe != "world":
    raise ValueError(f"{spec}: bench.sft_step builds the world recipe's traces "
                     f"(recipe {c.recipe!r})")
  setup = parts.load_data(c, workdir)
  mesh = parts.make_mesh(c)
  cfg, params, tok = parts.load_policy(c, setup.tokenizer, mesh)
  engine = make_engine(c, cfg, params, tok, setup.retriever, greedy=True, hooks=[])
  records = setup.splits["train"][:traces]
  rows_t, rows_l = world_recipe.scripted_traces(c, engine, records,
                                                world_recipe.passage_texts(setup))
  sft = from_dict(SFTConfig, c.sft, "sft")
  optimizer = make_optimizer(OptimConfig(lr=sft.lr, schedule="constant", total_steps=1,
                                         weight_decay=sft.weight_decay, grad_clip=1.0))
  state = place_train_state(init_train_state(params, optimizer), cfg, mesh, optimizer)
  loss_fn, denom = sft_loss_fn(cfg, context_weight=sft.context_weight)
  update_of = lambda batch: jit_update(make_update(loss_fn, denom, optimizer, 1), state, batch,
                                       mesh)
  widths = sorted(c.rollout.widths)
  width_of = np.asarray([pick_bucket(widths, len(t), f"trace {i}") for i, t in enumerate(rows_t)])
  on_accel = jax.default_backend() != "cpu"
  peak = measured_matmul_peak(jnp.bfloat16 if on_accel else jnp.float32,
                              8192 if on_accel else 1024) * jax.device_count()
  context = sft.context_weight > 0
  per_width = []
  for width in np.unique(width_of):
    idx = np.flatnonzero(width_of == width)
    state, compile_s, step_s, trained = time_width(cfg, state, update_of, rows_t, rows_l, idx,
                                                   int(width), sft, steps)
    flops = sft_flops(cfg, int(width), sft.batch_size, trained, context)
    per_width.append({
        "width": int(width), "share": round(len(idx) / len(rows_t), 4),
        "compile_s": round(compile_s, 3), "step_s": round(step_s, 4),
        "positions_per_s": round(sft.batch_size * int(width) / step_s, 1),
        "model_tflops_per_s": round(flops / step_s / 1e12, 5),
        "fraction_of_peak": round(flops / step_s / peak, 4), "flops": flops})
  share = lambda key: sum(w["share"] * w[key] for w in per_width)
  step_s = share("step_s")
  flops = share("flops")
  common = max(per_width, key=lambda w: w["share"])
  shape_rate = matmul_rate(sft.batch_size * common["width"], cfg.hidden_size,
                           cfg.intermediate_size)
  for w in per_width:
    w.pop("flops")
  return {
      "bench": "sft_step", "config": spec, "overrides": list(overrides),
      "params": cfg.num_params(), "layers": cfg.num_layers, "hidden": cfg.hidden_size,
      "intermediate": cfg.intermediate_size, "heads": cfg.num_heads, "vocab": cfg.vocab_size,
      "dtype": cfg.dtype, "backend": jax.default_backend(), "devices": jax.device_count(),
      "traces": len(rows_t), "batch": sft.batch_size, "gather": sft.gather,
      "context_weight": sft.context_weight, "steps_timed": steps, "widths": per_width,
      "step_s": round(step_s, 4),
      "sft_steps_s": round(step_s * sft.steps, 1),
      "model_tflops_per_s": round(flops / step_s / 1e12, 5),
      "measured_matmul_peak_tflops": round(peak / 1e12, 4),
      "fraction_of_peak": round(flops / step_s / peak, 4),
      "shape_matmul": [sft.batch_size * common["width"], cfg.hidden_size,
                       cfg.intermediate_size],
      "shape_matmul_tflops": round(shape_rate / 1e12, 5),
      "shape_matmul_fraction_of_peak": round(shape_rate / peak, 4),
      "load_avg_1min": round(os.getloadavg()[0], 2)}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", default=DEFAULT_CONFIG, help="FILE.py[:ARG] of a world recipe")
  ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                  help="config override (repeatable)")
  ap.add_argument("--steps", type=int, default=5, help="timed updates per width")
  ap.add_argument("--traces", type=int, default=256, help="training questions traced")
  ap.add_argument("--workdir", default=None, help="data and index go here (reused if present)")
  args = ap.parse_args(argv)
  if args.steps < 1 or args.traces < 1:
    ap.error("--steps and --traces must be >= 1")
  workdir = args.workdir or tempfile.mkdtemp(prefix="ragjax_bench_sft_")
  result = bench(args.config, args.set, steps=args.steps, traces=args.traces, workdir=workdir)
  print(json.dumps(result), flush=True)
  return result


if __name__ == "__main__":
  main()
