"""The GRPO step benchmark on the tiny Search-R1 config: built from the config through the
recipe components, it times rollout, log-prob and update and sets the update against the
matmul peak measured in the same run."""

from ragjax.bench.grpo_step import main

SMALLER = ["trainer.batch_prompts=2", "rl.group_size=2", "rl.mini_batch_size=4",
           "rl.micro_batch_size=2", "sampler.max_new_tokens=12", "protocol.max_turns=1"]


def test_tiny_grpo_step_reports_every_phase(tmp_path, capsys):
  argv = ["--config", "configs/search_r1.py:tiny", "--steps", "2", "--workdir", str(tmp_path)]
  for ov in SMALLER:
    argv += ["--set", ov]
  (r,) = main(argv)
  assert capsys.readouterr().out.count('"bench": "grpo_step"') == 1
  assert r["trajectories"] == 4 and r["prompts"] == 2 and r["group_size"] == 2
  assert r["retriever"] == "bm25" and r["steps"] == 2 and r["steps_timed"] >= 1
  # tiny scores the batch twice (old log-probs, reference), so every phase takes time
  assert not r["sampler_logprobs"] and r["kl_coef"] > 0
  for key in ("rollout_s", "logprob_s", "update_s", "step_s"):
    assert r[key] > 0, key
  assert r["rollout_s"] + r["logprob_s"] + r["update_s"] <= r["step_s"] + 1e-6
  assert 0 < r["trained_tokens"] <= r["tokens"] <= r["trajectories"] * r["padded_width"]
  assert r["measured_matmul_peak_tflops"] > 0
  assert 0 < r["update_fraction_of_peak"] < 2      # a fraction (timing noise aside)
  assert r["tokens_per_s"] > 0 and r["rollout_policy_tokens_per_s"] > 0
