"""Rollout memory against batch size, with waves and without.

    python -m ragjax.bench.rollout_memory                    # batch 8,16,32,64; waves of 8
    python -m ragjax.bench.rollout_memory --batch 16,64,256 --wave-rows 16 --preset qwen2.5-0.5b

The rollout benchmark's setup (`bench.rollout`: a planted Search-R1 policy, BM25 over real or
world passages, the same flags), greedy, `--turns` searches.  For each batch size the engine
runs once with every row at once (`wave_rows=0`) and once in waves of `--wave-rows`
(`EngineConfig.wave_rows`, what `rollout.kv_budget_gb` sets from a memory budget).

Measured: the peak bytes of live device arrays (`jax.live_arrays()`) at the start of every
sampler call of a real engine rollout, minus those live before it (the params): the KV cache
and the sampler's row state the rollout holds between calls.  XLA's temporaries inside one call are not
counted (they are the prefill / extend activations of one call, which waves bound the same
way).  References, printed beside it: the analytic KV cache of the rows in flight
(rows x cache length x layers x 2 x kv heads x head dim x bytes), the dry run's formula and
an upper bound; and the same at the widest the cache grew to (the per-layer cache of
`scan_layers=False` models is only as wide as its rows' attention window), which the
measurement should equal.
Memory does not depend on the machine's load, so these numbers are exact on a shared CPU.
One JSON line per (batch, waves) setting.
"""

from __future__ import annotations

import gc
import json
import tempfile

import jax
import numpy as np

from ragjax.bench.rollout import Setup, parser
from ragjax.bench.rollout_policies import TimedPolicy
from ragjax.models import kv_cache
from ragjax.rollout.engine import EngineConfig, RolloutEngine
from ragjax.rollout.protocols.search_r1 import SearchR1


def live_bytes() -> int:
  return int(sum(x.nbytes for x in jax.live_arrays()))


class PeakMemoryPolicy(TimedPolicy):
  """`TimedPolicy` (every call run to completion) that also records the peak of live bytes
  when each call starts: what the rollout holds between calls (after a call returns, the state
  it replaced is still referenced by the engine, so that moment would count two states)."""

  def reset(self):
    super().reset()
    self.peak = 0
    self.widest = 0          # the most cache slots a state held (the per-layer cache grows)

  def _run(self, kind, fn, *args, **kw):
    self.peak = max(self.peak, live_bytes())
    out = super()._run(kind, fn, *args, **kw)
    state = out[0] if isinstance(out, tuple) else out
    if hasattr(state, "cache"):
      self.widest = max(self.widest, kv_cache.width(state.cache))
    return out


def kv_bytes(cfg, rows: int, cache: int, dtype: str) -> int:
  item = np.dtype(dtype).itemsize if dtype != "bfloat16" else 2
  return rows * cache * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * item


def measure(setup: Setup, sampler, turns: int, batch: int, wave_rows: int) -> dict:
  args = setup.args
  protocol = SearchR1(top_k=args.top_k, max_turns=turns, obs_max_tokens=setup.obs_cap)
  policy = PeakMemoryPolicy(sampler)
  engine = RolloutEngine(protocol, policy, setup.env.retriever, setup.tokenizer,
                         EngineConfig(chat=False, wave_rows=wave_rows))
  prompts = setup.env.questions[:batch]
  gc.collect()
  base = live_bytes()
  out = engine.run(prompts, samples_per_prompt=1, seed=0)
  policy.peak = max(policy.peak, live_bytes())
  rows_in_flight = min(wave_rows or batch, batch)
  kv = kv_bytes(setup.cfg, rows_in_flight, sampler.config.max_cache_length, setup.dtype)
  kv_widest = kv_bytes(setup.cfg, rows_in_flight, policy.widest, setup.dtype)
  measured = policy.peak - base
  return {"bench": "rollout_memory", "batch": batch, "wave_rows": wave_rows or None,
          "rows_in_flight": rows_in_flight, "turns": turns,
          "cache_length": sampler.config.max_cache_length,
          "measured_rollout_mb": round(measured / 2**20, 2),
          "analytic_kv_mb": round(kv / 2**20, 2),
          "measured_over_kv": round(measured / kv, 3) if kv else None,
          "widest_cache_slots": policy.widest,
          "analytic_kv_at_widest_mb": round(kv_widest / 2**20, 2),
          "measured_over_kv_at_widest": round(measured / kv_widest, 3) if kv_widest else None,
          "params_mb": round(base / 2**20, 2),
          "trajectories": len(out.meta.rows)}


def main(argv=None):
  ap = parser(__doc__.splitlines()[0])
  ap.add_argument("--wave-rows", type=int, default=8, help="rows per wave in the waves arm")
  ap.set_defaults(batch=[8, 16, 32, 64], turns=[2])
  args = ap.parse_args(argv)
  args.batch_list = args.batch
  setup = Setup(args, args.workdir or tempfile.mkdtemp(prefix="ragjax_bench_rollout_memory_"))
  results = []
  for turns in args.turns:
    sampler = setup.sampler(turns)
    for batch in args.batch:
      for waves in (0, args.wave_rows):
        result = measure(setup, sampler, turns, batch, waves)
        print(json.dumps(result), flush=True)
        results.append(result)
  return results


if __name__ == "__main__":
  main()
