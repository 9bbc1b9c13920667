"""Sampler throughput against transformers `generate` on the same weights and batch.

    python -m ragjax.bench.sampler                                  # small model, CPU
    python -m ragjax.bench.sampler --preset qwen2.5-3b --batch 128  # GPU: adds HBM roofline

Both sides run greedy for exactly `--new-tokens` tokens per row (no eos), after one warm-up
run each; tokens/s counts generated tokens over wall time including the prompt prefill.  On a
GPU the JSON line also carries the fraction of the HBM-bandwidth roofline reached by the
decode steps: (param bytes + KV bytes of the valid positions) per step / step time / peak.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from ragjax.bench.timing import best_time  # noqa: E402
from ragjax.models.model_config import DecoderConfig, as_dtype, decoder_config_to_hf  # noqa: E402
from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.models.hf_io import params_to_hf_tensors  # noqa: E402
from ragjax.models.presets import get_preset  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402

# A ~25M-parameter Qwen2-shaped model: big enough that the math is not all overhead on CPU.
SMALL = DecoderConfig(arch="qwen2", vocab_size=8192, hidden_size=512, intermediate_size=1408,
                      num_layers=8, num_heads=8, num_kv_heads=2, head_dim=64,
                      rope_theta=10_000.0, tie_word_embeddings=True)

PEAK_HBM_BYTES_PER_S = {"h100": 3.35e12, "h200": 4.8e12, "a100": 2.0e12}


def _peak_bandwidth():
  dev = jax.devices()[0]
  if dev.platform != "gpu":
    return None, dev.device_kind
  kind = dev.device_kind.lower()
  for name, bw in PEAK_HBM_BYTES_PER_S.items():
    if name in kind:
      return bw, dev.device_kind
  return None, dev.device_kind


def hf_model(cfg: DecoderConfig, params, dtype: str, device: str):
  import torch
  from transformers import AutoConfig, AutoModelForCausalLM
  hf = decoder_config_to_hf(cfg)
  conf = AutoConfig.for_model(hf.pop("model_type"), **hf)
  with torch.device(device):
    model = AutoModelForCausalLM.from_config(conf, dtype=getattr(torch, dtype))
  tensors = params_to_hf_tensors(cfg, params)
  # torch cannot wrap ml_dtypes' bfloat16 arrays: go through float32 (exact for bf16 values).
  state = {k: torch.from_numpy(np.array(v, np.float32)).to(device=device,
                                                            dtype=getattr(torch, dtype))
           for k, v in tensors.items()}
  if cfg.tie_word_embeddings:
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
  model.load_state_dict(state, strict=True, assign=True)
  return model.eval()


def _weight_matmul_floor(params, batch: int, repeats: int = 20) -> float:
  """Seconds for one [batch, K] x [K, N] product with every weight matrix: what any decode
  step must at least spend on this backend (the CPU analogue of the HBM roofline)."""
  import jax.numpy as jnp
  mats = [m.reshape(-1, m.shape[-1]) for m in jax.tree.leaves(params) if m.ndim >= 2]

  @jax.jit
  def products(mats, x):
    return sum((jnp.full((batch, m.shape[0]), x, m.dtype) @ m).sum() for m in mats)

  jax.block_until_ready(products(mats, 1.0))
  t = time.perf_counter()
  for _ in range(repeats):
    out = products(mats, 1.0)
  jax.block_until_ready(out)
  return (time.perf_counter() - t) / repeats


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default=None, help="model preset (default: a small CPU model)")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt-len", type=int, default=32)
  ap.add_argument("--new-tokens", type=int, default=64)
  ap.add_argument("--cache-len", type=int, default=0,
                  help="KV-cache slots (default prompt + new tokens; a rollout sizes the cache "
                       "for whole multi-turn trajectories, e.g. 1024)")
  ap.add_argument("--attend-buckets", default="auto",
                  help="'auto' (powers of two), 'none' (always the whole cache) or a comma list")
  ap.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on GPU)")
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--skip-hf", action="store_true")
  ap.add_argument("--fused-projections", choices=("auto", "on", "off"), default="auto",
                  help="decode on the fused qkv / gate-up copy of the weights (auto: the "
                       "sampler's default, on for accelerators)")
  ap.add_argument("--decode-attention", default="xla", choices=("xla", "pallas"),
                  help="a decode step's attention: XLA's, or the Pallas kernel over each row's "
                       "length (SamplerConfig.decode_attention)")
  ap.add_argument("--attention-impl", default="", choices=("", "xla", "cudnn"),
                  help="prefill attention through jax.nn.dot_product_attention with this "
                       "implementation (model.attention_impl; '': ragjax's own)")
  args = ap.parse_args(argv)

  on_gpu = jax.default_backend() == "gpu"
  dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
  cfg = (get_preset(args.preset) if args.preset else SMALL).replace(
      dtype=dtype, param_dtype=dtype, eos_token_id=None, attention_impl=args.attention_impl)
  params = init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, cfg.vocab_size, args.prompt_len).tolist() for _ in range(args.batch)]
  cache_len = max(args.cache_len, args.prompt_len + args.new_tokens)
  buckets = {"auto": None, "none": ()}.get(args.attend_buckets)
  if args.attend_buckets not in ("auto", "none"):
    buckets = tuple(int(x) for x in args.attend_buckets.split(","))
  scfg = SamplerConfig(max_cache_length=cache_len, max_new_tokens=args.new_tokens,
                       prompt_buckets=(args.prompt_len,), extend_buckets=(1,), greedy=True,
                       eos_ids=(), attend_buckets=buckets,
                       fused_projections={"auto": None, "on": True, "off": False}[
                           args.fused_projections], decode_attention=args.decode_attention,
                       cpu_attention_kernel=args.decode_attention == "xla")
  sampler = Sampler(cfg, params, None, scfg)

  def run_ragjax():
    state = sampler.prefill(prompts)
    _, out = sampler.decode(state)
    jax.block_until_ready(out.tokens)
    return out

  t_ours = best_time(run_ragjax, args.repeats, warmup=True)
  # The decode loop alone, for the roofline (best of `repeats`).
  t_decode = float("inf")
  for _ in range(max(args.repeats, 1)):
    state = sampler.prefill(prompts)
    jax.block_until_ready(state.logits)
    t0 = time.perf_counter()
    _, out = sampler.decode(state)
    jax.block_until_ready(out.tokens)
    t_decode = min(t_decode, time.perf_counter() - t0)
  n_tokens = args.batch * args.new_tokens
  result = {"bench": "sampler", "preset": args.preset or "small", "params": cfg.num_params(),
            "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "cache_len": cache_len, "attend_buckets": args.attend_buckets,
            "dtype": dtype, "backend": jax.default_backend(),
            "fused_projections": sampler.fused, "attention_impl": cfg.attention_impl,
            "decode_attention": args.decode_attention,
            "ragjax_tokens_per_s": round(n_tokens / t_ours, 1)}

  if not args.skip_hf:
    import torch
    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    model = hf_model(cfg, params, dtype, device)
    ids = torch.tensor(prompts, device=device)

    def run_hf():
      with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             do_sample=False, pad_token_id=0)
      if device == "cuda":
        torch.cuda.synchronize()
      return out

    t_hf = best_time(run_hf, args.repeats, warmup=True)
    hf_out = run_hf()[:, args.prompt_len:].cpu().numpy()
    result["transformers_tokens_per_s"] = round(n_tokens / t_hf, 1)
    result["ratio"] = round(t_hf / t_ours, 2)
    ours = np.asarray(out.tokens)
    same = hf_out == ours
    # Per-position agreement; in bf16 two implementations round differently, and once a row
    # picks a different token the rest of that row diverges, so also report how far rows
    # agree before their first difference and how many rows agree entirely.
    result["greedy_token_agreement"] = round(float(same.mean()), 4)
    first_diff = np.where(same.all(axis=1), same.shape[1], np.argmin(same, axis=1))
    result["greedy_prefix_agreement"] = round(float(first_diff.mean() / same.shape[1]), 4)
    result["greedy_rows_identical"] = round(float(same.all(axis=1).mean()), 4)

  result["decode_step_ms"] = round(t_decode / args.new_tokens * 1e3, 3)
  if not on_gpu:
    floor = _weight_matmul_floor(params, args.batch)
    result["weight_matmul_floor_ms"] = round(floor * 1e3, 3)
    if "transformers_tokens_per_s" in result:
      # The best ratio any sampler could reach here: transformers' step over the floor.
      hf_step = args.batch / result["transformers_tokens_per_s"]
      result["ratio_ceiling"] = round(hf_step / floor, 2)
  peak, kind = _peak_bandwidth()
  result["device"] = kind
  if peak is None:
    result["hbm_roofline_fraction"] = "n/a (no GPU with a known HBM peak)"
  else:
    itemsize = np.dtype(as_dtype(dtype)).itemsize
    param_bytes = cfg.num_params() * itemsize
    kv_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize
    mean_len = args.prompt_len + (args.new_tokens + 1) / 2
    step_bytes = param_bytes + args.batch * mean_len * kv_per_token
    step_time = t_decode / args.new_tokens
    result["hbm_peak_TBps"] = peak / 1e12
    result["roofline_step_ms"] = round(step_bytes / peak * 1e3, 3)
    result["hbm_roofline_fraction"] = round(step_bytes / step_time / peak, 3)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
