"""The multi-turn rollout benchmark at a tiny shape: the engine, the re-prefill loop and the
transformers loop produce identical trajectories, and the JSON line has every field."""

import json

from ragjax.bench.rollout import LOOPS, main

TINY = ["--preset", "test", "--corpus", "world", "--turns", "2", "--batch", "3",
        "--repeats", "1", "--think-tokens", "6", "--query-words", "2", "--doc-tokens", "40",
        "--vocab", "2048", "--reprefill-rows", "2"]      # re-prefills 2 + 1 rows per turn


def test_three_loops_agree_and_report(tmp_path, capsys):
  (result,) = main(TINY + ["--workdir", str(tmp_path)])
  printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert printed == result
  assert result["identical"] is True and result["attend_step"] == 0
  assert result["rows_identical"] == {"reprefill": 3, "transformers": 3, "of": 3}
  assert result["max_logprob_diff_reprefill"] < 1e-3
  assert result["searches_per_row"] == 2.0          # the planted grammar searches every turn
  assert 3 * 40 <= result["retrieved_tokens_per_search"] <= 3 * (40 + 30)   # text + title line
  for name in LOOPS:
    loop = result["loops"][name]
    assert loop["trajectories_per_s"] > 0 and loop["policy_tokens_per_s"] > 0
    assert set(loop["time_s"]) == {"prefill", "decode", "extend", "retrieval", "host"}
    assert loop["time_s"]["retrieval"] > 0
  eng, rep = result["loops"]["engine"], result["loops"]["reprefill"]
  # The design difference, counted: the engine feeds every document once (extend); the
  # re-prefill loop feeds the growing history again at every turn.
  assert eng["tokens_fed"]["extend"] > 0 and rep["tokens_fed"]["extend"] == 0
  assert rep["tokens_fed"]["prefill"] > eng["tokens_fed"]["prefill"] + eng["tokens_fed"]["extend"]
  assert eng["tokens_fed"]["decode"] == rep["tokens_fed"]["decode"] == result["policy_tokens"]
  hf = result["loops"]["transformers"]
  assert hf["tokens_processed"]["prefill"] > eng["tokens_fed"]["extend"]
  assert result["ratio_engine_vs_reprefill"] > 0 and result["ratio_engine_vs_transformers"] > 0


def test_chunked_turns_overlap_retrieval_and_agree(tmp_path):
  """`--decode-chunk` with a retriever that takes 4 ms per query: searches go to the retrieval
  thread as rows end their turns (the planted grammar's turns differ in length) and run while
  other rows decode; the engine agrees on every row with the re-prefill loop and with itself on
  whole turns.  How much retrieval time that hides is the benchmark's number, not asserted: on a
  loaded machine it can be none."""
  (result,) = main(TINY + ["--workdir", str(tmp_path), "--skip-hf", "--decode-chunk", "3",
                           "--retrieval-query-ms", "4"])
  assert result["identical"] is True
  assert result["rows_identical"] == {"reprefill": 3, "whole_turns": 3, "of": 3}
  assert result["ratio_engine_vs_whole_turns"] > 0
  assert result["decode_chunk"] == 3
  eng, rep = result["loops"]["engine"], result["loops"]["reprefill"]
  assert eng["retrieval_call_s"] >= 0.004 * 3 * 2            # 3 rows x 2 searches
  assert eng["searches_behind_decoding"] > 0
  assert eng["retrieval_overlap"] <= 1
  assert result["loops"]["whole_turns"]["searches_behind_decoding"] == 0
  assert eng["tokens_fed"]["decode"] == rep["tokens_fed"]["decode"] == result["policy_tokens"]
