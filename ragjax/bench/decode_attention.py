"""Where a decode step's time goes on this backend: the engine's cached attention vs layouts.

    python -m ragjax.bench.decode_attention                      # the rollout bench's `small`
    python -m ragjax.bench.decode_attention --batch 32 --cache 2688 --windows 1536,2048,2688

Times, jitted and warmed up (median of `--repeats` calls):

* `step_ms`: one real decode step of `ragjax.sampling.forward.forward_into_cache` (T = 1, the
  sampler's path, cache donated, attention to the first `window` slots) in each cache layout
  of `ragjax.models.kv_cache`: `stacked` ([L, B, S, KVH, D], the window sliced out of it per
  layer; what `scan_layers` configs decode with), `per_layer` (one [B, KVH, S, D] array per
  layer, the window sliced out of it when smaller than the cache) and `per_layer_grown` (the
  per-layer cache only `window` slots wide, attended whole: what the sampler decodes with for
  `scan_layers=False`, growing the cache through the windows, when its CPU kernel is off)
  and `kernel` (the same cache, the attention in `ragjax.models.cpu_attention`'s kernel,
  which reads each row's keys and values up to its own slot: the sampler's default on an
  unsharded CPU; left out where the kernel cannot be built);
* the attention alone over L layers in three layouts, on the same shapes:
  `stacked_window` (keys as [B, S, KVH, D] sliced out of the stacked cache),
  `heads_major_window` ([L, B, KVH, S, D], the window sliced), and `per_layer_full` (one
  [B, KVH, S, D] array per layer, the whole cache attended, no slice).

The three attention variants give the same output (past the window the keys score -1e4, so
the full-cache variant's softmax matches the window's; checked by
`tests/test_bench_decode_attention.py`).  On a CPU the slices are materialised before the dot
(a fresh copy of the window per layer per step), which costs more than the slots they skip;
one JSON line per window says by how much.

The roofline reference, measured in the same run: `read_gb_per_s` is the rate of a jitted sum
over a 256 MB float32 array (best of `--repeats`), and `step_bytes` what a decode step must
read at the least: every weight it multiplies by (all parameters but the embedding table, of
which it gathers B rows; the table is read whole when tied as the unembedding) and the keys
and values of the attended window.  `read_floor_ms` = step_bytes / read_gb_per_s, and
`floor_over_step` the share of the grown-cache step it accounts for (1.0: the step runs at
the memory system's read rate, and only reading less makes it faster); `floor_over_kernel_step`
the same for the kernel's step (whose attention reads only `--position` slots per row, less
than the floor counts).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _median_ms(fn, args, repeats: int) -> float:
  import jax
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return round(float(np.median(times)) * 1000, 2)


def measured_read_bandwidth(repeats: int, mbytes: int = 256) -> float:
  """Bytes per second of a jitted float32 sum over `mbytes` MB (best of `repeats`)."""
  import jax
  import jax.numpy as jnp
  from ragjax.bench.timing import best_time
  x = jnp.ones((mbytes * 2 ** 20 // 4,), jnp.float32)
  f = jax.jit(jnp.sum)
  return x.size * 4 / best_time(lambda: jax.block_until_ready(f(x)), repeats, warmup=True)


def decode_step_bytes(cfg, batch: int, window: int, bytes_per_value: int = 4) -> int:
  """Least bytes a decode step reads (see the module docstring)."""
  weights = cfg.num_params()
  if not cfg.tie_word_embeddings:
    weights -= cfg.vocab_size * cfg.hidden_size - batch * cfg.hidden_size
  kv = cfg.num_layers * 2 * batch * cfg.num_kv_heads * window * cfg.head_dim
  return (weights + kv) * bytes_per_value


def attention_variants(layers, batch, cache, kv_heads, group, head_dim, window):
  """{name: (jitted fn, args)} for the three layouts; each returns the summed [B, KVH, G, D]."""
  import jax
  import jax.numpy as jnp
  L, B, S, K, G, D, W = layers, batch, cache, kv_heads, group, head_dim, window
  q = jnp.ones((B, K, G, D), jnp.float32) / D      # positive: keys of -1e4 score -1e4
  scores = (((3,), (3,)), ((0, 1), (0, 1)))
  mix = (((3,), (2,)), ((0, 1), (0, 1)))

  def attend(q, keys, values):          # keys, values [B, K, s, D]
    p = jax.nn.softmax(jax.lax.dot_general(q, keys, scores), axis=-1)
    return jax.lax.dot_general(p, values, mix)

  def stacked_window(k_all, v_all, q):  # [L, B, S, K, D]
    out = 0.0
    for layer in range(L):
      keys = jax.lax.dynamic_slice(k_all, (layer, 0, 0, 0, 0), (1, B, W, K, D))[0]
      values = jax.lax.dynamic_slice(v_all, (layer, 0, 0, 0, 0), (1, B, W, K, D))[0]
      s = jnp.einsum("bkgd,bskd->bkgs", q, keys)
      out = out + jnp.einsum("bkgs,bskd->bkgd", jax.nn.softmax(s, axis=-1), values)
    return out

  def heads_major_window(k_all, v_all, q):   # [L, B, K, S, D]
    out = 0.0
    for layer in range(L):
      keys = jax.lax.dynamic_slice(k_all, (layer, 0, 0, 0, 0), (1, B, K, W, D))[0]
      values = jax.lax.dynamic_slice(v_all, (layer, 0, 0, 0, 0), (1, B, K, W, D))[0]
      out = out + attend(q, keys, values)
    return out

  def per_layer_full(ks, vs, q):        # L arrays [B, K, S, D]
    out = 0.0
    for keys, values in zip(ks, vs):
      out = out + attend(q, keys, values)
    return out

  # The same keys and values in every layout; slots past the window hold -inf-scoring keys
  # (a large negative dot with q), so attending the whole cache gives the window's answer.
  rng = np.random.default_rng(0)
  k = rng.standard_normal((L, B, S, K, D)).astype(np.float32)
  v = rng.standard_normal((L, B, S, K, D)).astype(np.float32)
  k[:, :, W:] = -1e4
  major = lambda x: jnp.asarray(np.ascontiguousarray(x.transpose(0, 1, 3, 2, 4)))
  return {"stacked_window": (jax.jit(stacked_window), (jnp.asarray(k), jnp.asarray(v), q)),
          "heads_major_window": (jax.jit(heads_major_window), (major(k), major(v), q)),
          "per_layer_full": (jax.jit(per_layer_full),
                             ([major(k)[i] for i in range(L)], [major(v)[i] for i in range(L)],
                              q))}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--cache", type=int, default=2688, help="cache slots (the sampler's length)")
  ap.add_argument("--windows", default="1536,2048,2688", help="attended slots, comma list")
  ap.add_argument("--position", type=int, default=1400, help="each row's next slot")
  ap.add_argument("--repeats", type=int, default=20)
  args = ap.parse_args(argv)
  windows = [int(w) for w in args.windows.split(",")]
  if any(not args.position < w <= args.cache for w in windows):
    ap.error("every window must be in (--position, --cache]")
  import jax
  import jax.numpy as jnp
  from ragjax.bench.rollout import model_config
  from ragjax.models.decoder import init_params
  from ragjax.models.kv_cache import init_cache
  from ragjax.models import cpu_attention
  from ragjax.sampling.forward import forward_into_cache
  cfg = model_config("small", 8192, "float32")
  params = init_params(cfg, jax.random.PRNGKey(0))
  b = args.batch
  tok = jnp.zeros((b, 1), jnp.int32)
  starts = jnp.full((b,), args.position, jnp.int32)
  last = jnp.zeros((b,), jnp.int32)
  read_rate = measured_read_bandwidth(args.repeats)
  for w in windows:
    steps = {kernel: jax.jit(
        lambda p, c, t, s, w=w, k=kernel: forward_into_cache(cfg, p, c, t, s, last, window=w,
                                                               cpu_kernel=k),
        donate_argnums=(1,)) for kernel in (False, True)}   # the sampler donates its cache too
    step_ms = {}
    layouts = ("stacked", "per_layer", "per_layer_grown")
    for layout in layouts + (("kernel",) if cpu_attention.available() else ()):
      step = steps[layout == "kernel"]
      slots = w if layout in ("per_layer_grown", "kernel") else args.cache
      cache = init_cache(cfg.replace(scan_layers=layout == "stacked"), b, slots, "float32")
      cache, logits = step(params, cache, tok, starts)
      times = []
      for _ in range(args.repeats):
        t0 = time.perf_counter()
        cache, logits = step(params, cache, tok, starts)
        jax.block_until_ready(logits)
        times.append(time.perf_counter() - t0)
      step_ms[layout] = round(float(np.median(times)) * 1000, 2)
    line = {"bench": "decode_attention", "backend": jax.default_backend(), "batch": b,
            "cache": args.cache, "window": w, "layers": cfg.num_layers,
            "kv_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "step_ms": step_ms,
            "stacked_over_grown_step": round(step_ms["stacked"] / step_ms["per_layer_grown"], 2)}
    step_bytes = decode_step_bytes(cfg, b, w)
    floor_ms = step_bytes / read_rate * 1000
    line.update(read_gb_per_s=round(read_rate / 1e9, 2), step_bytes=step_bytes,
                read_floor_ms=round(floor_ms, 2),
                floor_over_step=round(floor_ms / step_ms["per_layer_grown"], 3))
    if "kernel" in step_ms:
      line["floor_over_kernel_step"] = round(floor_ms / step_ms["kernel"], 3)
    variants = attention_variants(cfg.num_layers, b, args.cache, cfg.num_kv_heads,
                                  cfg.num_heads // cfg.num_kv_heads, cfg.head_dim, w)
    results = {name: _median_ms(fn, fargs, args.repeats) for name, (fn, fargs) in variants.items()}
    line["attention_ms"] = results
    line["stacked_window_over_per_layer_full"] = round(
        results["stacked_window"] / results["per_layer_full"], 2)
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
