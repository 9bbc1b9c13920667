"""Checkpoint load time: ragjax `load_decoder` vs transformers `from_pretrained`, same files.

  python -m ragjax.bench.load [--preset qwen2.5-0.5b] [--dtype bfloat16] [--dir DIR]

Writes a random checkpoint of the preset's shape (once; reused if DIR already holds it), then
times loading it into device arrays with ragjax and into a PyTorch model with transformers, and
prints one JSON line with both times and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np


def write_random_checkpoint(cfg, out_dir: str, dtype: str, seed: int = 0) -> int:
  """HF-layout random tensors of the config's shapes, written shard by shard."""
  from ragjax.models.model_config import as_dtype, decoder_config_to_hf
  from ragjax.models.hf_io import decoder_tensor_maps
  from ragjax.models.safetensors_io import write_safetensors
  os.makedirs(out_dir, exist_ok=True)
  rng = np.random.default_rng(seed)
  np_dtype = as_dtype(dtype)
  shards, current, size, limit = [], {}, 0, 2 * 2**30
  for t in decoder_tensor_maps(cfg):
    arr = (rng.standard_normal(t.hf_shape, np.float32) * 0.02).astype(np_dtype)
    if current and size + arr.nbytes > limit:
      shards.append(current)
      current, size = {}, 0
    current[t.hf_name] = arr
    size += arr.nbytes
  shards.append(current)
  weight_map, total = {}, 0
  for i, shard in enumerate(shards):
    name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    write_safetensors(os.path.join(out_dir, name), shard)
    weight_map.update({k: name for k in shard})
    total += sum(a.nbytes for a in shard.values())
  with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
  hf = decoder_config_to_hf(cfg)
  hf["torch_dtype"] = hf["dtype"] = dtype
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(hf, f)
  return total


def main(argv=None):
  parser = argparse.ArgumentParser(description="checkpoint load-time benchmark")
  parser.add_argument("--preset", default="qwen2.5-0.5b")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--dir", default=None, help="where the random checkpoint lives")
  parser.add_argument("--skip_transformers", action="store_true")
  args = parser.parse_args(argv)

  import jax
  from ragjax.models.hf_io import load_decoder
  from ragjax.models.presets import get_preset

  cfg = get_preset(args.preset)
  out_dir = args.dir or os.path.join(tempfile.gettempdir(), f"ragjax-bench-{args.preset}-{args.dtype}")
  if not os.path.exists(os.path.join(out_dir, "config.json")):
    write_random_checkpoint(cfg, out_dir, args.dtype)
  nbytes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir)
               if f.endswith(".safetensors"))

  def ragjax_load():
    _, params = load_decoder(out_dir, dtype=args.dtype, param_dtype=args.dtype)
    jax.block_until_ready(params)
    return params

  ragjax_load()  # warm the page cache so both loaders read from memory
  t0 = time.perf_counter()
  params = ragjax_load()
  ragjax_s = time.perf_counter() - t0
  n_params = sum(x.size for x in jax.tree.leaves(params))
  del params

  result = {"bench": "load", "preset": args.preset, "dtype": args.dtype, "params": int(n_params),
            "bytes_on_disk": nbytes, "ragjax_s": round(ragjax_s, 3),
            "ragjax_GBps": round(nbytes / ragjax_s / 1e9, 3), "device": jax.devices()[0].device_kind}
  if not args.skip_transformers:
    import torch
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=getattr(torch, args.dtype))
    hf_s = time.perf_counter() - t0
    del model
    result.update({"transformers_s": round(hf_s, 3), "speedup_vs_transformers": round(hf_s / ragjax_s, 2)})
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
