"""Policy-update throughput: tokens/s and MFU of the jitted GRPO train step for a preset.

  python -m ragjax.bench.train_step --preset tiny --seq 256 [--batch 8] [--micro 1] [--steps 5]
  python -m ragjax.bench.train_step --preset tiny --seq 352 --batch 64 --policy-tokens 24 --gather

`--policy-tokens N` trains N tokens per row (the rest is prompt and documents, as in a search
trajectory); `--gather` also times the step with `rl.gather` (only trained positions go
through the unembedding) on the same batch and reports the speed-up over the dense step.

Model FLOPs per token = 6 * N_matmul + 12 * L * H * D * T (attention, PaLM convention), where
N_matmul counts the unembedding once and not the input lookup.  The reference measured in the
same run is the device's matmul peak (a large bf16 matmul on accelerators, float32 on CPU);
on GPUs MFU against the published dense bf16 peak is reported too.  Hardware FLOPs add what
the backward pass computes again (`recompute_flops_per_token`: rematerialised layers under
`--remat-policy`, the chunked log-prob's unembedding), so `hfu_*` >= `mfu_*`; MFU, the goal's
measure, counts the model's FLOPs only.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models.decoder import init_params
from ragjax.models.presets import get_preset
from ragjax.parallel.mesh import make_mesh
from ragjax.rl.batch import TrainBatch, trained_positions
from ragjax.rl.run_config import OptimConfig, RLConfig
from ragjax.rl.optim import make_optimizer
from ragjax.rl.train_step import (batch_shardings, init_train_state, jit_update, make_update,
                                  policy_loss_fn, shard_train_state)

PUBLISHED_PEAK = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def model_flops_per_token(cfg, seq: int) -> float:
  n = cfg.num_params()
  if cfg.tie_word_embeddings:
    n += cfg.vocab_size * cfg.hidden_size      # the embedding is used again as the unembedding
  n -= cfg.vocab_size * cfg.hidden_size        # the input lookup is not a matmul
  return 6.0 * n + 12.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq


def recompute_flops_per_token(cfg, seq: int, chunk: int) -> float:
  """FLOPs per token the backward pass runs again, beyond the model FLOPs.

  With `cfg.remat` a layer's forward runs again for the values its backward needs: under
  remat_policy "full" every product but the last (down_proj: nothing needs its output) and
  the attention's score and mix products (4 * H * D * T, counted over the full T x T as the
  model FLOPs count it); under "dots" only the attention's.  The log-prob's vocabulary scan
  (`ragjax.rl.logprobs`, more than one chunk of `chunk` columns) recomputes its logits in the
  backward pass: 2 * V * E."""
  e, m, h, kvh, d = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads,
                     cfg.head_dim)
  flops = 0.0
  if cfg.remat:
    flops += 4.0 * cfg.num_layers * h * d * seq
    if cfg.remat_policy == "full":
      flops += 2.0 * cfg.num_layers * (e * (h + 2 * kvh) * d + h * d * e + 2 * e * m)
  if cfg.vocab_size > chunk:
    flops += 2.0 * cfg.vocab_size * e
  return flops


def measured_matmul_peak(dtype, n: int, reps: int = 10) -> float:
  """FLOP/s of an n x n x n product on random data (constant inputs draw less power and run
  faster than real data on GPUs): `reps` back-to-back products, best of 3 after a warm-up."""
  a = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32).astype(dtype)
  b = jax.random.normal(jax.random.PRNGKey(2), (n, n), jnp.float32).astype(dtype)
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  best = float("inf")
  for _ in range(3):
    t = time.perf_counter()
    outs = [f(a, b) for _ in range(reps)]
    jax.block_until_ready(outs)
    best = min(best, time.perf_counter() - t)
  return 2.0 * n ** 3 * reps / best


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--preset", default="tiny")
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--batch", type=int, default=0, help="rows; default = number of devices x 1")
  ap.add_argument("--micro", type=int, default=1)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--dtype", default="")
  ap.add_argument("--remat", action="store_true")
  ap.add_argument("--remat-policy", default="full", choices=("full", "dots"),
                  help="with --remat: what a layer keeps for its backward (model.remat_policy)")
  ap.add_argument("--scan", action="store_true")
  ap.add_argument("--chunk", type=int, default=8192)
  ap.add_argument("--attention-impl", default="", choices=("", "xla", "cudnn"),
                  help="attention through jax.nn.dot_product_attention with this implementation "
                       "(model.attention_impl; '': ragjax's own)")
  ap.add_argument("--policy-tokens", type=int, default=0,
                  help="trained tokens per row (0: 5/8 of the row, prompt and one block masked)")
  ap.add_argument("--gather", action="store_true", help="also time the gathered policy loss")
  args = ap.parse_args(argv)

  on_accel = jax.default_backend() != "cpu"
  dtype = args.dtype or ("bfloat16" if on_accel else "float32")
  cfg = get_preset(args.preset).replace(dtype=dtype, param_dtype="float32", remat=args.remat,
                                        remat_policy=args.remat_policy, scan_layers=args.scan,
                                        attention_impl=args.attention_impl)
  ndev = jax.device_count()
  b = args.batch or ndev
  rl = RLConfig(kl_coef=0.001, logprob_chunk=args.chunk)
  opt = make_optimizer(OptimConfig(lr=1e-6))
  mesh = make_mesh(fsdp=-1)
  params = jax.jit(lambda k: init_params(cfg, k))(jax.random.PRNGKey(0))
  state = shard_train_state(init_train_state(params, opt), cfg, mesh, opt)
  del params
  rng = np.random.default_rng(0)
  t = args.seq
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (b, t)), jnp.int32)
  if args.policy_tokens:
    if not 0 < args.policy_tokens < t:
      ap.error(f"--policy-tokens must be in (0, {t})")
    mask = np.zeros((b, t), np.float32)
    half = args.policy_tokens // 2                      # a query early, an answer at the end
    mask[:, t // 8: t // 8 + half] = 1
    mask[:, t - (args.policy_tokens - half):] = 1
  else:
    mask = np.ones((b, t), np.float32)
    mask[:, : t // 4] = 0                                  # prompt
    mask[:, t // 2: t // 2 + t // 8] = 0                   # a retrieved block
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  batch = TrainBatch(tokens=tokens, positions=jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t)),
                     attention_mask=jnp.ones((b, t), jnp.int32), loss_mask=f32(mask),
                     advantages=f32(rng.normal(size=(b, 1)) * mask),
                     old_logprobs=f32(np.full((b, t), -8.0)), ref_logprobs=f32(np.full((b, t), -8.0)))
  loss_fn, denom = policy_loss_fn(cfg, rl)
  update = make_update(loss_fn, denom, opt, args.micro)

  def timed(state, batch):
    """(state, first-step metrics, compile s, median step s over args.steps more steps)."""
    batch = jax.device_put(batch, batch_shardings(batch, mesh))
    step = jit_update(update, state, batch, mesh)
    t0 = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
      t0 = time.perf_counter()
      state, _ = step(state, batch)
      jax.block_until_ready(state.step)
      times.append(time.perf_counter() - t0)
    return state, m, compile_s, float(np.median(times))

  extra = {}
  if args.gather:
    g_batch = batch.replace(loss_index=jnp.asarray(trained_positions(mask)))
    state, _, _, g_sec = timed(state, g_batch)
    extra = {"gather_step_s": round(g_sec, 4), "gather_K": int(g_batch.loss_index.shape[1])}
  state, m, compile_s, sec = timed(state, batch)
  if args.gather:
    extra["gather_speedup"] = round(sec / extra["gather_step_s"], 3)
  tokens_per_s = b * t / sec
  model_flops = model_flops_per_token(cfg, t)
  hardware_flops = model_flops + recompute_flops_per_token(cfg, t, args.chunk)
  achieved, hardware = model_flops * tokens_per_s, hardware_flops * tokens_per_s
  peak_dtype = jnp.bfloat16 if on_accel else jnp.float32
  peak_measured = measured_matmul_peak(peak_dtype, 8192 if on_accel else 1024) * ndev
  kind = jax.devices()[0].device_kind
  published = next((v for k, v in PUBLISHED_PEAK.items() if k in kind), None)
  out = {"bench": "train_step", "preset": args.preset, "seq": t, "batch": b, "micro": args.micro,
         "devices": ndev, "device_kind": kind, "dtype": dtype, "remat": args.remat,
         "remat_policy": args.remat_policy if args.remat else None, "scan": args.scan,
         "attention_impl": args.attention_impl,
         "step_s": round(sec, 4), "compile_s": round(compile_s, 1),
         "tokens_per_s": round(tokens_per_s, 1), "model_tflops_per_s": round(achieved / 1e12, 4),
         "measured_matmul_peak_tflops": round(peak_measured / 1e12, 3),
         "mfu_vs_measured_peak": round(achieved / peak_measured, 4),
         "published_peak_tflops": None if published is None else published / 1e12,
         "mfu_vs_published_peak": None if published is None else round(achieved / (published * ndev), 4),
         "model_flops_per_token": model_flops, "hardware_flops_per_token": hardware_flops,
         "hardware_tflops_per_s": round(hardware / 1e12, 4),
         "hfu_vs_measured_peak": round(hardware / peak_measured, 4),
         "hfu_vs_published_peak":
             None if published is None else round(hardware / (published * ndev), 4),
         "policy_tokens_per_row": int(mask[0].sum()),
         "loss_finite": bool(np.isfinite(float(m["loss"]))), **extra}
  print(json.dumps(out))


if __name__ == "__main__":
  main()
