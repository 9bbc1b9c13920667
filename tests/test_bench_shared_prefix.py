"""The shared-head prefill benchmark on the synthetic world with Search-R1's prompt (every prompt
starts with the same instruction): both arms answer alike, the shared arm computes fewer
prompt positions."""

from ragjax.bench.shared_prefix import main


def test_world_prompts_share_their_instruction(tmp_path, capsys):
  r = main(["--config", "configs/search_r1.py:tiny", "--questions", "8", "--unit", "64",
            "--workdir", str(tmp_path)])
  assert capsys.readouterr().out.count('"speedup"') == 1
  assert r["questions"] == 8 and r["unit"] == 64 and r["same_answers"] == 8
  assert 0 < r["shared_prefill_positions"] < r["reference_prefill_positions"]
  assert r["reference_s"] > 0 and r["shared_s"] > 0 and r["speedup"] > 0
