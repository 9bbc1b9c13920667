"""Compare a checkpoint's logits in transformers (PyTorch) and ragjax before trusting it.

  python -m ragjax.tools.logit_check --hf_dir DIR [--tol 1e-4] [--rtol 1e-5] [--prompt "..."]...
  python -m ragjax.tools.logit_check --hf_dir SmolLM2-135M-Instruct.Q4_1.gguf

Runs a few prompts (a right-padded batch of different lengths) through both implementations in
float32, prints the max |Δlogit| over real tokens and whether greedy next tokens agree, and
exits 1 when the difference exceeds the tolerance: the larger of --tol and --rtol times the
reference's largest |logit| (float32 round-off grows with depth and with the logits' scale: a
30-layer real model with logits up to ~40 differs by ~1e-4 where a 2-layer random one differs
by ~1e-6).  `--hf_dir` may be a `.gguf` file, read by transformers' GGUF reader on both sides.
Needs torch (the dev extras).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

DEFAULT_PROMPTS = (
    "The capital of France is",
    "Question: who wrote the novel Dune? <search> Dune author </search>",
    "1 2 3 4 5 6 7 8 9",
)


def _token_batch(tokenizer, prompts, vocab_size):
  if tokenizer is not None:
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] or [0] for p in prompts]
  else:  # a bare checkpoint: deterministic ids stand in for text
    rng = np.random.RandomState(0)
    ids = [list(rng.randint(0, vocab_size, 4 + 3 * i)) for i in range(len(prompts))]
  t = max(len(x) for x in ids)
  tokens = np.zeros((len(ids), t), np.int64)
  mask = np.zeros((len(ids), t), np.int64)
  for i, row in enumerate(ids):
    tokens[i, :len(row)] = row
    mask[i, :len(row)] = 1
  return tokens, mask


def check(hf_dir: str, prompts=DEFAULT_PROMPTS) -> dict:
  import jax
  import jax.numpy as jnp
  import torch
  from transformers import AutoModelForCausalLM

  from ragjax.models.decoder import Decoder
  from ragjax.models.hf_io import load_decoder, load_tokenizer

  jax.config.update("jax_default_matmul_precision", "highest")
  cfg, params = load_decoder(hf_dir, dtype="float32", param_dtype="float32")
  try:
    tokenizer = load_tokenizer(hf_dir)
  except Exception:  # no tokenizer files next to the weights
    tokenizer = None
  tokens, mask = _token_batch(tokenizer, prompts, cfg.vocab_size)
  from ragjax.models.gguf_io import is_gguf
  if is_gguf(hf_dir):
    folder, name = os.path.split(os.path.abspath(hf_dir))
    ref_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     local_files_only=True).eval()
  else:
    ref_model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
  with torch.no_grad():
    ref = ref_model(torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits.numpy()
  ours, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                               attention_mask=jnp.asarray(mask))
  ours = np.asarray(ours)
  valid = mask.astype(bool)
  diff = float(np.abs(ours - ref)[valid].max())
  last = mask.sum(1) - 1
  rows = np.arange(len(tokens))
  agree = (ours[rows, last].argmax(-1) == ref[rows, last].argmax(-1)).tolist()
  return {"hf_dir": hf_dir, "arch": cfg.arch, "prompts": len(prompts),
          "tokens": int(valid.sum()), "max_abs_logit_diff": diff,
          "max_abs_logit": float(np.abs(ref)[valid].max()), "greedy_next_agrees": agree}


def tolerance(result: dict, tol: float, rtol: float) -> float:
  """The allowed |Δlogit|: `tol`, or `rtol` times the reference's largest |logit| if larger."""
  return max(tol, rtol * result["max_abs_logit"])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--hf_dir", required=True, help="HF checkpoint directory")
  parser.add_argument("--tol", type=float, default=1e-4, help="max allowed |Δlogit| (float32)")
  parser.add_argument("--rtol", type=float, default=1e-5,
                      help="max allowed |Δlogit| relative to the largest |logit| (the larger "
                           "of the two tolerances applies)")
  parser.add_argument("--prompt", action="append", help="a prompt (repeatable)")
  args = parser.parse_args(argv)
  result = check(args.hf_dir, tuple(args.prompt) if args.prompt else DEFAULT_PROMPTS)
  result["tol"] = tolerance(result, args.tol, args.rtol)
  result["ok"] = result["max_abs_logit_diff"] <= result["tol"]
  print(json.dumps(result))
  print(f"max |Δlogit| = {result['max_abs_logit_diff']:.3e} over {result['tokens']} tokens "
        f"(tol {result['tol']:.3g}): {'OK' if result['ok'] else 'FAIL'}", file=sys.stderr)
  return 0 if result["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
