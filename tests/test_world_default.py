"""The embedded default end to end at toy scale: `python -m ragjax.train` writes every output.

Runs the real pipeline (world, tokenizer, MiniLM + ScaNN index, SFT through the engine, GRPO,
evaluation, table, plots, viewer, HF export) with `configs/world.py:toy`, then checks each
output is there and well formed.  The toy policy is far too small to learn; the full-size
run's numbers are in BENCHMARKS.md.
"""

import json
import os
import sys

import numpy as np
import pytest

from _xla_helpers import xla_flags
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_toy_pipeline_writes_every_output(tmp_path):
  work = str(tmp_path / "run")
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = xla_flags()   # one CPU device, as a user's laptop has
  proc = preloaded.run([sys.executable, "-m", "ragjax.train", "--config=configs/world.py:toy",
                         f"--config.workdir={work}", "--config.progress=False"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "| test | grpo + retrieval |" in proc.stdout

  summary = json.load(open(os.path.join(work, "summary.json")))
  for key in ("test_em_with_retrieval", "test_em_without_retrieval", "test_em_cold_start",
              "grpo_minus_cold_start", "test_em_multi_hop"):
    assert key in summary["headline"]
  assert set(summary["timings_s"]) >= {"world_and_tokenizer", "index", "sft", "grpo",
                                       "evaluation", "probe", "total"}
  probe = summary["copy_probe"]
  assert set(probe) == {"cold start train", "cold start test", "grpo train", "grpo test"}
  for res in probe.values():   # every group: a positive token count and a finite, positive NLL
    assert "search/word" in res and all(n > 0 and 0 < v < 50 for n, v in res.values()), res

  table = open(os.path.join(work, "results.md")).read()
  for split in ("dev", "test"):
    for system in ("grpo + retrieval", "grpo, no retrieval", "cold-start (sft) + retrieval"):
      assert f"| {split} | {system} |" in table
  assert "EM 2hop" in table and "EM retry" in table
  assert "| search | name |" in table and "NLL grpo test (tokens)" in table

  plots = summary["plots"]
  assert {os.path.basename(p) for p in plots} >= {"reward.png", "em.png",
                                                  "searches_per_traj.png",
                                                  "response_length.png"}
  for p in plots:
    with open(p, "rb") as f:
      assert f.read(8) == PNG_MAGIC and os.path.getsize(p) > 1000, p

  html = open(summary["viewer"], encoding="utf-8").read()
  assert html.startswith("<!doctype html>") and "grpo + retrieval on test" in html
  recs = [json.loads(l) for l in open(summary["viewer"][:-5] + ".jsonl")]
  assert recs and all("golden_answers" in r and "spans" in r for r in recs)

  # Metrics log and orbax checkpoints of the GRPO run.
  metrics = [json.loads(l) for l in open(os.path.join(work, "rl", "metrics.jsonl"))]
  assert [m["step"] for m in metrics] == [1, 2]
  assert all(np.isfinite(m["loss"]) for m in metrics if "loss" in m)
  assert os.listdir(os.path.join(work, "rl", "latest"))

  # The exported policy loads in transformers with the same logits as ragjax.
  import torch
  from transformers import AutoModelForCausalLM, AutoTokenizer

  from ragjax.models.decoder import Decoder
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  policy = summary["policy"]
  assert os.path.exists(os.path.join(summary["cold_start_policy"], "config.json"))
  # The exported tokenizer gives the ids the policy was trained on (years in digit pairs);
  # AutoTokenizer on the policy directory would build Qwen2Tokenizer and split digits singly.
  tok = load_tokenizer(policy)
  text = "Question: When was Kalo Venn born?\n<search> Kalo Venn </search>\n\nborn in 1808.\n"
  trained = AutoTokenizer.from_pretrained(os.path.join(work, "tokenizer"))
  ids = tok(text, add_special_tokens=False)["input_ids"]
  assert ids == trained(text, add_special_tokens=False)["input_ids"]
  assert type(tok).__name__ == "TokenizersBackend"
  cfg, params = load_decoder(policy)
  ours, _ = Decoder(cfg).apply({"params": params}, np.asarray([ids], np.int32))
  with torch.no_grad():
    ref = AutoModelForCausalLM.from_pretrained(policy).eval()(torch.tensor([ids])).logits.numpy()
  assert np.abs(np.asarray(ours) - ref).max() < 1e-4

  # The evaluate command on the exported policy, with sampled pass@1 / pass@k rows.
  proc = preloaded.run([sys.executable, "-m", "ragjax.evaluate", "--checkpoint", policy,
                         "--config=configs/world.py:toy", f"--config.workdir={work}", "--limit=6",
                         "--samples=3", "--temperature=0.7"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  rows = {line.split(" | ")[1]: line for line in proc.stdout.splitlines()
          if line.startswith("| test |")}
  assert set(rows) == {"policy + retrieval", "policy, no retrieval",
                       "policy + retrieval, pass@1 (T=0.7, 3 samples)",
                       "policy + retrieval, pass@3 (T=0.7, 3 samples)"}, rows
  mean = lambda row: float(row.split(" | ")[2].split(" ")[0])
  assert (mean(rows["policy + retrieval, pass@3 (T=0.7, 3 samples)"])
          >= mean(rows["policy + retrieval, pass@1 (T=0.7, 3 samples)"]))
  # An A/B ablation from this run's cold start (reused, not retrained): paired statistics are
  # recomputed here from the per-question scores it writes.
  proc = preloaded.run([sys.executable, "-m", "ragjax.ablate", "--config=configs/world.py:toy",
                         f"--config.workdir={work}", "--config.progress=False",
                         "--config.trainer.num_steps=1", "--config.trainer.eval_every=0",
                         "--a", "base:", "--b", "kl:rl.kl_coef=0.05"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "cold start: reusing" in proc.stdout and "sft:" not in proc.stdout
  report = json.load(open(os.path.join(work, "ablation", "ablation.json")))
  a, b = (np.asarray(report["em"][k]) for k in ("base", "kl"))
  assert len(a) == len(b) == len(report["qtypes"]) == 16
  top = report["rows"][0]
  assert top["type"] == "all" and top["n"] == 16
  assert top["diff_mean"] == pytest.approx(float((b - a).mean()))
  assert top["diff_low"] <= top["diff_mean"] <= top["diff_high"]
  assert "| all | 16 |" in proc.stdout

  bad = preloaded.run([sys.executable, "-m", "ragjax.evaluate", "--checkpoint", policy,
                        "--samples=2", "--temperature=0"], cwd=ROOT, env=env,
                      capture_output=True, text=True, timeout=120)
  assert bad.returncode == 2 and "--temperature > 0" in bad.stderr
