"""The context-scaling benchmark at a tiny shape: one row per context length, both sides
timed, ratios consistent with the times."""

import json

from ragjax.bench.context_scaling import main


def test_rows_per_length(capsys):
  main(["--preset", "test", "--vocab", "512", "--lengths", "32,64", "--batch", "2",
        "--steps", "3", "--repeats", "1", "--torch-threads", "1"])
  r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert r["bench"] == "context_scaling" and r["max_context"] == 64
  assert [row["context"] for row in r["rows"]] == [32, 64]
  for row in r["rows"]:
    for side in ("ragjax", "transformers"):
      assert row[f"{side}_prefill_s"] > 0 and row[f"{side}_decode_step_ms"] > 0
    ratio = row["transformers_prefill_s"] / row["ragjax_prefill_s"]
    assert abs(row["prefill_ratio"] - ratio) < 0.02 * ratio + 0.01
    assert row["torch_threads"] == 1
