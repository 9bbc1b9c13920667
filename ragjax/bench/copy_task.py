"""Can the embedded default's policy learn in-context copying in the steps it gets?

A search policy trained from scratch must copy names it has never seen: from the question
into its query, from a passage into its answer.  Transformers do that with induction heads
(attend to the token after an earlier occurrence of the current token).  This benchmark trains
the default policy shape (configs/world.py) on the bare skill: random token sequences in which
a span of 3..12 tokens repeats after a gap, loss on the repeat only (its first token cannot be
predicted and is left out).

  python -m ragjax.bench.copy_task                  # offsets vary: needs an induction head
  python -m ragjax.bench.copy_task --fixed-offset   # control: a fixed offset is positional
  python -m ragjax.bench.copy_task --tiled --length 64
      # denser: a random period of 6..20 tokens repeated to the end, loss on every token
      # after the first period (still an induction task: the period varies per row)

It prints the loss every 100 steps next to the reference a non-copying model gets, the
uniform guess ln(vocab); ratio = loss / ln(vocab) (1.0: nothing learned, ~0: copies).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np


def make_tiled_batch(rng: np.random.Generator, batch: int, length: int, vocab: int,
                     low: int = 6, high: int = 20):
  """tokens [B, T]: each row a random period of low..high tokens repeated to the end; the
  loss mask [B, T] covers every token after the first period (minus the repeat's first)."""
  x = np.zeros((batch, length), np.int32)
  m = np.zeros((batch, length), np.float32)
  for b in range(batch):
    period = int(rng.integers(low, high + 1))
    x[b] = np.resize(rng.integers(3, 3 + vocab, period), length)
    m[b, period + 1:] = 1
  return x, m


def make_batch(rng: np.random.Generator, batch: int, length: int, vocab: int,
               fixed_offset: bool):
  """tokens [B, T] and a loss mask [B, T] over the repeated span (minus its first token)."""
  x = rng.integers(3, 3 + vocab, (batch, length))
  m = np.zeros((batch, length), np.float32)
  for b in range(batch):
    if fixed_offset:
      span, start, gap = 8, 0, 0
    else:
      span = int(rng.integers(3, 13))
      start = int(rng.integers(0, length - 2 * span - 8 + 1))
      gap = int(rng.integers(0, 9))
    rep = start + span + gap
    x[b, rep:rep + span] = x[b, start:start + span]
    m[b, rep + 1:rep + span] = 1
  return x.astype(np.int32), m


def main(argv=None) -> None:
  import jax
  import jax.numpy as jnp
  import optax
  from configs.world import get_config
  from ragjax.models.model_config import DecoderConfig
  from ragjax.models.decoder import Decoder, init_params

  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--steps", type=int, default=1500)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--length", type=int, default=32)
  p.add_argument("--vocab", type=int, default=700, help="distinct tokens in the sequences")
  p.add_argument("--lr", type=float, default=3e-3)
  p.add_argument("--fixed-offset", action="store_true")
  p.add_argument("--tiled", action="store_true",
                 help="rows are a random 6..20-token period repeated (needs --length >= 44)")
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args(argv)
  if a.length < 32:
    raise SystemExit("--length must be >= 32 (room for a 12-token span, its repeat and a gap)")
  if a.tiled and a.length < 44:
    raise SystemExit("--tiled needs --length >= 44 (two periods of up to 20 tokens and more)")
  if a.tiled and a.fixed_offset:
    raise SystemExit("--tiled and --fixed-offset are two different tasks: pick one")

  m = get_config().model
  cfg = DecoderConfig(arch="qwen2", vocab_size=2048, hidden_size=m.hidden_size,
                      intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                      num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                      rope_theta=m.rope_theta, tie_word_embeddings=True)
  if a.vocab + 3 > cfg.vocab_size:
    raise SystemExit(f"--vocab must be <= {cfg.vocab_size - 3}")
  params = init_params(cfg, jax.random.PRNGKey(a.seed))
  model = Decoder(cfg)

  def loss_fn(params, x, mask):
    logits = model.apply({"params": params}, x)[0][:, :-1]
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), x[:, 1:, None], -1)[..., 0]
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()

  warmup = min(20, a.steps // 2)
  opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, a.lr, warmup, a.steps, a.lr * 0.1),
                    weight_decay=0.01)

  @jax.jit
  def step(params, state, x, mask):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, mask)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  state = opt.init(params)
  rng = np.random.default_rng(a.seed)
  ref = math.log(a.vocab)
  n_params = sum(int(v.size) for v in jax.tree.leaves(params))
  print(f"policy {n_params / 1e6:.2f}M params ({m.num_layers} layers, hidden {m.hidden_size}); "
        f"{'tiled periods' if a.tiled else 'fixed offsets' if a.fixed_offset else 'varying offsets'}"
        f"; reference ln(vocab) = {ref:.3f}")
  t0, window = time.perf_counter(), []
  for i in range(1, a.steps + 1):
    data = (make_tiled_batch(rng, a.batch, a.length, a.vocab) if a.tiled else
            make_batch(rng, a.batch, a.length, a.vocab, a.fixed_offset))
    params, state, loss = step(params, state, *map(jnp.asarray, data))
    window.append(float(loss))
    if i % 100 == 0 or i == a.steps:
      mean = float(np.mean(window))
      window = []
      print(f"step {i:5d}  loss {mean:.3f}  ratio {mean / ref:.3f}  "
            f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
  main()
