"""Float32 numerics on the device against transformers, and bfloat16's error against float32.

    python -m ragjax.bench.numerics                                     # tiny model, CPU
    python -m ragjax.bench.numerics --preset qwen2.5-0.5b --batch 8     # on a GPU

The same random weights on both sides (transformers on the same GPU when torch has CUDA), in
float32 with full-precision matmuls on both (JAX `highest`; torch without TF32, which JAX's
default precision on a GPU would use):

1. logits: one forward over [batch, prompt-len] random tokens; `max_abs_logit_diff` over all
   logits.  Gate: <= --tol.
2. greedy decoding: ragjax's `Sampler` (jit prefill, then the KV-cache decode loop; a float32
   cache, where the sampler's default on an accelerator is bfloat16) against
   transformers `generate`, --new-tokens per row.  `greedy_agreement` is the fraction of
   positions where both pick the same token, with one allowance: a row whose first
   difference falls on a near-tie (transformers' own logits of the two tokens within
   2 x --tol, so either token is a correct greedy choice) counts as agreeing up to there and is
   not compared after it (the two continuations then differ by construction).  Gate: 1.0.
   The raw per-position agreement, the rows identical and each first difference (row,
   position, transformers' margin) are reported beside it.
3. bfloat16: the same forward with bf16 weights and activations (JAX's default precision, as
   a bf16 run computes) against float32: `bf16_rel_error` = ||bf16 - f32|| / ||f32|| over all
   logits, beside transformers' own bf16-vs-f32 error on the same weights.  Gate: <= --bf16-tol.

Prints one JSON line (`ok`, and `failed` naming the gates that failed); exits 1 when a gate
fails.  `--self-test-perturb E` scales ragjax's weights by (1 + E) after transformers has its
copy: the check must then fail (how the gates are tested).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from ragjax.bench.sampler import hf_model  # noqa: E402
from ragjax.models.decoder import Decoder, init_params  # noqa: E402
from ragjax.models.presets import get_preset  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402


def forward(cfg, params, tokens) -> np.ndarray:
  logits, _ = jax.jit(Decoder(cfg).apply)({"params": params}, jnp.asarray(tokens))
  return np.asarray(logits, np.float32)


def greedy(cfg, params, prompts, new_tokens: int) -> np.ndarray:
  """[batch, new_tokens] greedy tokens from the Sampler (prefill + decode loop), its KV cache
  in the model's dtype (the sampler's default on an accelerator is bfloat16)."""
  scfg = SamplerConfig(max_cache_length=len(prompts[0]) + new_tokens,
                       max_new_tokens=new_tokens, prompt_buckets=(len(prompts[0]),),
                       extend_buckets=(1,), greedy=True, eos_ids=(), cache_dtype=cfg.dtype)
  sampler = Sampler(cfg, params, None, scfg)
  _, out = sampler.decode(sampler.prefill(prompts))
  return np.asarray(out.tokens)


def torch_logits(model, tokens, device) -> np.ndarray:
  import torch
  with torch.no_grad():
    out = model(torch.tensor(tokens, device=device)).logits
  return out.float().cpu().numpy()


def torch_greedy(model, prompts, new_tokens: int, device):
  """([batch, new_tokens] tokens, [new_tokens, batch, vocab] raw logits) from `generate`."""
  import torch
  ids = torch.tensor(prompts, device=device)
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
  tokens = out.sequences[:, ids.shape[1]:].cpu().numpy()
  return tokens, np.stack([s.float().cpu().numpy() for s in out.logits])


def greedy_agreement(ours: np.ndarray, ref: np.ndarray, ref_logits: np.ndarray,
                     tie: float) -> dict:
  """Agreement of two greedy runs, a first difference at a near-tie allowed (module doc)."""
  same = ours == ref
  agree = compared = ties = 0
  firsts = []
  for r in range(ours.shape[0]):
    if same[r].all():
      agree += same.shape[1]
      compared += same.shape[1]
      continue
    j = int(np.argmin(same[r]))
    margin = float(ref_logits[j, r, ref[r, j]] - ref_logits[j, r, ours[r, j]])
    firsts.append({"row": r, "position": j, "margin": round(margin, 7)})
    if margin <= tie:
      ties += 1
      agree += j + 1
      compared += j + 1
    else:
      agree += int(same[r].sum())
      compared += same.shape[1]
  return {"greedy_agreement": round(agree / compared, 4),
          "greedy_token_agreement": round(float(same.mean()), 4),
          "greedy_rows_identical": round(float(same.all(axis=1).mean()), 4),
          "near_ties": ties, "first_differences": firsts[:8]}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="tiny", help="model preset (random weights)")
  ap.add_argument("--batch", type=int, default=4)
  ap.add_argument("--prompt-len", type=int, default=16)
  ap.add_argument("--new-tokens", type=int, default=16)
  ap.add_argument("--tol", type=float, default=1e-3, help="float32 max |Δlogit| allowed")
  ap.add_argument("--bf16-tol", type=float, default=0.1,
                  help="bf16 logits' relative error vs float32 allowed")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--self-test-perturb", type=float, default=0.0,
                  help="scale ragjax's weights by 1 + this (the check must then fail)")
  args = ap.parse_args(argv)

  import torch
  torch.set_float32_matmul_precision("highest")      # no TF32 on the reference side
  device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
  cfg = get_preset(args.preset).replace(dtype="float32", param_dtype="float32",
                                        eos_token_id=None)
  params = jax.jit(lambda k: init_params(cfg, k))(jax.random.PRNGKey(args.seed))
  rng = np.random.default_rng(args.seed)
  tokens = rng.integers(0, cfg.vocab_size, (args.batch, args.prompt_len))
  ref32 = hf_model(cfg, params, "float32", device)
  ref_logits = torch_logits(ref32, tokens, device)
  ref_tokens, ref_steps = torch_greedy(ref32, tokens.tolist(), args.new_tokens, device)
  del ref32
  ref16 = hf_model(cfg, params, "bfloat16", device)
  ref_bf16 = torch_logits(ref16, tokens, device)
  del ref16
  if args.self_test_perturb:
    params = jax.tree.map(lambda p: p * (1 + args.self_test_perturb), params)

  with jax.default_matmul_precision("highest"):
    ours = forward(cfg, params, tokens)
    ours_tokens = greedy(cfg, params, tokens.tolist(), args.new_tokens)
  cfg16 = cfg.replace(dtype="bfloat16", param_dtype="bfloat16")
  ours_bf16 = forward(cfg16, jax.tree.map(lambda p: p.astype(jnp.bfloat16), params), tokens)

  rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
  result = {"bench": "numerics", "preset": args.preset, "params": cfg.num_params(),
            "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
            "torch_device": device, "jax": jax.__version__,
            "max_abs_logit_diff": float(np.abs(ours - ref_logits).max()), "tol": args.tol,
            "max_abs_logit": float(np.abs(ref_logits).max()),
            **greedy_agreement(ours_tokens, ref_tokens, ref_steps, 2 * args.tol),
            "bf16_rel_error": round(rel(ours_bf16, ours), 5),
            "bf16_max_abs_diff": round(float(np.abs(ours_bf16 - ours).max()), 5),
            "transformers_bf16_rel_error": round(rel(ref_bf16, ref_logits), 5),
            "bf16_tol": args.bf16_tol, "self_test_perturb": args.self_test_perturb}
  failed = [name for name, bad in (
      ("float32_logits", not result["max_abs_logit_diff"] <= args.tol),
      ("float32_greedy", result["greedy_agreement"] != 1.0),
      ("bf16_logits", not result["bf16_rel_error"] <= args.bf16_tol)) if bad]
  result.update(ok=not failed, failed=failed)
  print(json.dumps(result), flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
