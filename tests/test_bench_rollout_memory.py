"""The rollout memory benchmark at a tiny shape: without waves the rollout's memory grows with
the batch, with waves it stays at one wave's, and both equal the analytic KV cache of the rows
in flight at the width the cache grew to (at most the full-length one)."""

from ragjax.bench.rollout_memory import main

TINY = ["--preset", "test", "--corpus", "world", "--turns", "1", "--batch", "2,4",
        "--wave-rows", "2", "--think-tokens", "6", "--query-words", "2", "--doc-tokens", "40",
        "--vocab", "1024"]


def test_waves_keep_memory_flat_and_one_batch_grows(tmp_path):
  rows = {(r["batch"], r["wave_rows"]): r for r in main(TINY + ["--workdir", str(tmp_path)])}
  one, waves = [rows[(b, None)] for b in (2, 4)], [rows[(b, 2)] for b in (2, 4)]
  assert one[1]["measured_rollout_mb"] > 1.9 * one[0]["measured_rollout_mb"] > 0
  assert waves[1]["measured_rollout_mb"] == waves[0]["measured_rollout_mb"]
  assert waves[1]["trajectories"] == 4
  for r in rows.values():
    assert r["measured_over_kv"] < 1.05, r                 # the full-length bound
    assert abs(r["measured_over_kv_at_widest"] - 1) < 0.05, r
    assert 0 < r["widest_cache_slots"] <= r["cache_length"]
