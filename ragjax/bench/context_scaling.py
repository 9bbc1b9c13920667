"""Prefill and decode cost against context length: the JAX sampler vs transformers, same weights.

    python -m ragjax.bench.context_scaling                     # the rollout bench's small shape
    python -m ragjax.bench.context_scaling --lengths 128,512,1024,2048 --batch 8

Where a multi-turn rollout spends its time depends on how each implementation's cost grows
with the context: every turn appends documents, so the second half of a Search-R1 rollout runs
at 1-3k tokens of context.  For each length T this times, on a random model of the shape of
`ragjax.bench.rollout --preset` and after a warm-up, best of `--repeats`:

* prefill of `--batch` rows of T tokens: `Sampler.prefill` vs the transformers model's forward
  (`logits_to_keep=1`, as `generate` prefills);
* decode steps at that context: `--steps` greedy tokens after the prefill, `Sampler.decode`
  vs `generate` (its decode forwards, timed with `ragjax.bench.hf_loop.ForwardTimer`),
  in ms per step.

The transformers side runs at every `--torch-threads` count and reports its best.  Prints one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from ragjax.bench.hf_loop import ForwardTimer  # noqa: E402
from ragjax.bench.rollout import SHAPES, int_list, model_config  # noqa: E402
from ragjax.bench.timing import best_time  # noqa: E402
from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="small", help=f"{sorted(SHAPES)} or a models preset")
  ap.add_argument("--vocab", type=int, default=8192)
  ap.add_argument("--lengths", type=int_list, default=[128, 512, 1024, 2048])
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--steps", type=int, default=32, help="decode steps per measurement")
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--torch-threads", type=int_list, default=[1, os.cpu_count() or 1])
  args = ap.parse_args(argv)

  import torch
  from transformers import AutoModelForCausalLM
  from ragjax.models.hf_io import save_decoder
  cfg = model_config(args.preset, args.vocab, "float32")
  params = init_params(cfg, jax.random.PRNGKey(0))
  out_dir = tempfile.mkdtemp(prefix="ragjax_bench_ctx_")
  save_decoder(out_dir, cfg, params)
  model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
  timer = ForwardTimer(model)
  rng = np.random.default_rng(0)
  top = max(args.lengths)
  rows = []
  for length in args.lengths:
    ids = rng.integers(3, cfg.vocab_size, (args.batch, length))
    cache = -(-(length + args.steps) // 128) * 128
    scfg = SamplerConfig(max_cache_length=cache, max_new_tokens=args.steps, greedy=True,
                         prompt_buckets=(length,), extend_buckets=(16,), eos_ids=())
    sampler = Sampler(cfg, params, None, scfg)
    prompts = ids.tolist()
    jax_prefill = best_time(lambda: jax.block_until_ready(sampler.prefill(prompts)), args.repeats,
                           warmup=True)

    def jax_decode():
      state = jax.block_until_ready(sampler.prefill(prompts))
      t0 = time.perf_counter()
      jax.block_until_ready(sampler.decode(state))
      return time.perf_counter() - t0

    jax_decode()
    jax_step = min(jax_decode() for _ in range(args.repeats)) / args.steps
    tt = torch.from_numpy(ids)
    hf = {}
    for threads in args.torch_threads:
      torch.set_num_threads(threads)
      with torch.no_grad():
        pre = best_time(lambda: model(input_ids=tt, logits_to_keep=1), args.repeats, warmup=True)
        steps = []
        for _ in range(args.repeats + 1):
          timer.reset()
          model.generate(input_ids=tt, attention_mask=torch.ones_like(tt), do_sample=False,
                         max_new_tokens=args.steps, min_new_tokens=args.steps, pad_token_id=0)
          steps.append(timer.seconds["decode"] / max(timer.positions["decode"] // args.batch, 1))
      hf[threads] = (pre, min(steps[1:]))
    threads = min(hf, key=lambda n: hf[n][0] + hf[n][1] * args.steps)
    hf_prefill, hf_step = hf[threads]
    rows.append({"context": length, "ragjax_prefill_s": float(f"{jax_prefill:.4g}"),
                 "transformers_prefill_s": float(f"{hf_prefill:.4g}"),
                 "prefill_ratio": round(hf_prefill / jax_prefill, 2),
                 "ragjax_decode_step_ms": float(f"{jax_step * 1e3:.4g}"),
                 "transformers_decode_step_ms": float(f"{hf_step * 1e3:.4g}"),
                 "decode_ratio": round(hf_step / jax_step, 2), "torch_threads": threads})
  print(json.dumps({"bench": "context_scaling", "preset": args.preset,
                    "params": cfg.num_params(), "batch": args.batch, "steps": args.steps,
                    "max_context": top, "backend": jax.default_backend(),
                    "load_avg_1min": round(os.getloadavg()[0], 2), "rows": rows}))


if __name__ == "__main__":
  main()
