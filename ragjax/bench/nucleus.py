"""Top-p sampling's cost per decode step: the nucleus found among a few candidates against
the whole vocabulary sorted for every row (what every row paid before, and what the rows whose
nucleus is larger still pay), at a real vocabulary's size.

    python -m ragjax.bench.nucleus                                  # Qwen2.5's 151,936 ids
    python -m ragjax.bench.nucleus --batch 128 --top-p 0.9 --repeats 20

Two kinds of rows: `peaked` (logits drawn with a spread that puts the nucleus within the
candidates, as a trained model's usually is) and `flat` (a nucleus of most of the vocabulary,
as random weights give: every row falls back to the full sort).  For each, one jitted
`sample_tokens` call per setting (median of `--repeats` after a warm-up), with `--candidates`
and with candidates = the vocabulary (the full sort), and whether both drew the same tokens.
One JSON line.
"""

from __future__ import annotations

import argparse
import json
import jax
import jax.numpy as jnp
import numpy as np

from ragjax.bench.timing import median_time
from ragjax.sampling.sample import sample_tokens


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--vocab", type=int, default=151936)
  ap.add_argument("--top-p", type=float, default=0.9)
  ap.add_argument("--candidates", type=int, default=1024)
  ap.add_argument("--repeats", type=int, default=10)
  args = ap.parse_args(argv)
  rng = np.random.default_rng(0)
  keys = jax.random.split(jax.random.PRNGKey(0), args.batch)
  rows = {"peaked": 6.0, "flat": 0.1}            # the logits' spread
  result = {"bench": "nucleus", "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind, "batch": args.batch, "vocab": args.vocab,
            "top_p": args.top_p, "candidates": args.candidates}
  for name, spread in rows.items():
    logits = jnp.asarray(rng.normal(size=(args.batch, args.vocab)) * spread, jnp.float32)
    probs = np.sort(np.asarray(jax.nn.softmax(logits, axis=-1)), axis=-1)[:, ::-1]
    held = float((probs[:, :args.candidates].sum(-1) >= args.top_p).mean())
    out = {}
    for label, cand in (("candidates", args.candidates), ("full_sort", args.vocab)):
      fn = jax.jit(lambda l, k, c=cand: sample_tokens(
          l, k, None, greedy=False, temperature=1.0, top_k=0, top_p=args.top_p, nucleus=True,
          candidates=c)[0])
      ms = round(1e3 * median_time(lambda: fn(logits, keys), args.repeats), 3)
      out[label] = (ms, np.asarray(fn(logits, keys)))
    result[name] = {"rows_held_by_candidates": held,
                    "ms_candidates": out["candidates"][0], "ms_full_sort": out["full_sort"][0],
                    "speedup": round(out["full_sort"][0] / out["candidates"][0], 2),
                    "same_tokens": bool(np.array_equal(out["candidates"][1], out["full_sort"][1]))}
  print(json.dumps(result), flush=True)
  return result


if __name__ == "__main__":
  main()
