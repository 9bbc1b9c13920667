"""LoRA: what decoding with merged weights costs against what an adapter-aware decode would add.

    python -m ragjax.bench.lora                          # ~25M-parameter model, CPU
    python -m ragjax.bench.lora --preset qwen2.5-3b --rank 64 --batch 64   # on an accelerator

The trainer merges the adapters into the base once per weight sync (once per RL step) and the
sampler decodes with plain weights.  This measures, in one run on the same weights: the merge
(jitted, all seven projections of every layer); one decode turn of `--new-tokens` tokens for
`--batch` rows with the merged weights (the JAX sampler); and the adapter products an
adapter-aware decode would have to add to every step (x A B for every adapted projection of
every layer, for the batch's new token), times the number of steps.  The last is a floor on
the adapter-aware overhead (it leaves out the extra kernel launches inside the layers).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.bench.sampler import SMALL
from ragjax.bench.timing import median_time
from ragjax.models.decoder import init_params
from ragjax.models.lora import LoraConfig, init_adapters, merge, num_adapter_params
from ragjax.models.presets import get_preset
from ragjax.sampling import Sampler, SamplerConfig


def run(preset: str, rank: int, batch: int, new_tokens: int, prompt: int, repeats: int) -> dict:
  cfg = SMALL if preset == "small" else get_preset(preset)
  params = init_params(cfg, jax.random.PRNGKey(0))
  lora = LoraConfig(rank=rank, alpha=float(rank))
  keys = iter(jax.random.split(jax.random.PRNGKey(1), 10_000))
  adapters = jax.tree.map(lambda x: x + 0.01 * jax.random.normal(next(keys), x.shape),
                          init_adapters(params, lora))
  merge_fn = jax.jit(lambda p, a: merge(p, a, lora))
  t_merge = median_time(lambda: merge_fn(params, adapters), repeats)
  merged = merge_fn(params, adapters)

  sampler = Sampler(cfg, merged, None, SamplerConfig(
      max_cache_length=prompt + new_tokens + 8, max_new_tokens=new_tokens,
      prompt_buckets=(prompt,), extend_buckets=(16,), greedy=True, eos_ids=()))
  prompts = np.random.default_rng(0).integers(1, cfg.vocab_size, (batch, prompt)).tolist()

  def turn():
    state = sampler.prefill(prompts, seed=0)
    _, out = sampler.decode(state)
    return out.tokens
  t_turn = median_time(turn, repeats)

  flat = [(a, b) for a, b in zip(jax.tree.leaves(adapters)[0::2], jax.tree.leaves(adapters)[1::2])]

  @jax.jit
  def adapter_step(x):
    return sum((jnp.full((batch, a.shape[0]), x, a.dtype) @ a @ b).sum() for a, b in flat)
  t_adapter = median_time(lambda: adapter_step(1.0), repeats) * new_tokens
  return {"bench": "lora", "preset": preset, "rank": rank, "batch": batch,
          "new_tokens": new_tokens, "prompt": prompt, "params": cfg.num_params(),
          "adapter_params": num_adapter_params(adapters), "device": jax.devices()[0].device_kind,
          "merge_s": round(t_merge, 5), "decode_turn_s": round(t_turn, 4),
          "adapter_products_per_turn_s": round(t_adapter, 5),
          "merge_over_turn": round(t_merge / t_turn, 4),
          "adapter_products_over_turn": round(t_adapter / t_turn, 4)}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="small")
  ap.add_argument("--rank", type=int, default=64)
  ap.add_argument("--batch", type=int, default=16)
  ap.add_argument("--new-tokens", type=int, default=64)
  ap.add_argument("--prompt", type=int, default=128)
  ap.add_argument("--repeats", type=int, default=5)
  a = ap.parse_args(argv)
  print(json.dumps(run(a.preset, a.rank, a.batch, a.new_tokens, a.prompt, a.repeats)))


if __name__ == "__main__":
  main()
