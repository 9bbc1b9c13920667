"""Each signature world's tiny variant (`configs/signatures.py:<method>-toy`) through
`python -m ragjax.ablate` with its own A/B arms (its `ablation` section), as BENCHMARKS.md's commands run the full
size: the real world, index, cold start, engine and trainer, both arms evaluated on the same
questions, the signature metric logged every RL step and compared in the report."""

import json
import os
import shutil
import sys

import pytest

from _recipe_helpers import ROOT, train_env

sys.path.insert(0, os.path.join(ROOT, "configs"))
import signatures  # noqa: E402  (configs/signatures.py)
import _preloaded as preloaded

# A variant's workdir starts as a copy of an earlier variant's (its world's index and, where
# the cold-start fields are the same, its cold start: reused by the run's own fingerprint
# checks, retrained where they differ): the combined world is AutoRefine's (start_fingerprint
# equal, tested below: its cold start is reused), REX-RAG's has Search-R1's passages (only the
# question mix differs: its index is reused) and another cold start.
FROM = {"combined": "autorefine", "rex_rag": "search_r1"}
WORKDIRS = {}


@pytest.mark.parametrize("method", signatures.VARIANTS)
def test_signature_world_ablation_runs(method, tmp_path):
  c = signatures.get_config(f"{method}-toy")
  WORKDIRS[method] = tmp_path
  earlier = WORKDIRS.get(FROM.get(method))
  if earlier is not None:                    # not when this variant runs alone
    shutil.copytree(earlier, tmp_path, dirs_exist_ok=True,
                    ignore=lambda d, names: ["ablation"] if d == str(earlier) else [])
  a, b = c.ablation.a, c.ablation.b          # the arms python -m ragjax.ablate takes from it
  for stage in signatures.PREPARE.get(method, ()):
    proc = preloaded.run(
        [sys.executable, "-m", "ragjax.train", f"--config=configs/signatures.py:{method}-toy",
         f"--config.workdir={tmp_path}", "--config.progress=False", f"--config.stage={stage}"],
        cwd=ROOT, env=train_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
  proc = preloaded.run(
      [sys.executable, "-m", "ragjax.ablate", f"--config=configs/signatures.py:{method}-toy",
       f"--config.workdir={tmp_path}", "--config.progress=False"],
      cwd=ROOT, env=train_env(), capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-4000:]
  if method == "combined" and earlier is not None:
    assert "cold start: reusing" in proc.stdout
  report = json.load(open(tmp_path / "ablation" / "ablation.json"))
  names = [s["name"] for s in report["signatures"]]
  assert names == list(c.rl.signatures) and names
  assert "| signature |" in proc.stdout
  arms = [arm.split(":")[0] for arm in (a, b)]
  assert len(report["em"][arms[0]]) == len(report["em"][arms[1]]) > 0   # the same questions
  assert report["qtypes"] and len(report["qtypes"]) == len(report["em"][arms[0]])
  for arm in arms:                           # per question, for pooling seeds (--pool)
    for name in c.rl.signatures:
      values = report["signature_values"][arm][name]
      assert len(values["num"]) == len(values["den"]) == len(report["qtypes"])
  for arm, spec in zip(arms, (a, b)):
    rl_dir = tmp_path / "ablation" / arm / "rl"
    if spec.endswith(":start"):              # the shared start, evaluated untrained
      assert not rl_dir.exists()
      continue
    logs = [json.loads(l) for l in open(rl_dir / "metrics.jsonl") if l.strip()]
    assert len(logs) == c.trainer.num_steps
    for name in c.rl.signatures:             # logged every step (the rate only where it applies)
      assert all(f"signature/{name}_n" in m for m in logs)


def test_ablation_refuses_two_untrained_arms(tmp_path):
  proc = preloaded.run(
      [sys.executable, "-m", "ragjax.ablate", "--config=configs/signatures.py:search_r1-toy",
       f"--config.workdir={tmp_path}", "--a", "x:start", "--b", "y:start"],
      cwd=ROOT, env=train_env(), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and "both arms are 'start'" in proc.stderr
  assert "Traceback" not in proc.stderr
  # a config without an ablation section and no --b: one line saying what to give
  proc = preloaded.run(
      [sys.executable, "-m", "ragjax.ablate", "--config=configs/world.py:toy",
       f"--config.workdir={tmp_path}"],
      cwd=ROOT, env=train_env(), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and "give the arms" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_full_size_designs_are_the_ones_benchmarks_md_reports():
  """The values of each committed design that BENCHMARKS.md's "Method signatures" results
  depend on (loading the configs only; the runs take 10-40 minutes each)."""
  c = signatures.get_config("autorefine")
  assert c.traces.no_search_rate == 0.0
  assert dict(c.world.qtype_weights) == {"1hop": 0.7, "2hop": 0.3}
  assert c.world.distractor_rate == 1.0 and c.protocol.top_k == 3 and c.trainer.num_steps == 100
  assert (c.traces.refine_miss_rate, c.traces.answer_miss_rate) == (0.6, 0.6)
  c = signatures.get_config("rex_rag")
  assert c.traces.no_search_rate == 0.9 and c.rex_rag.pool == "search"
  assert c.rl.signatures == ("searched",) and c.ablation.a == "probes_off:rex_rag.p=0.0"
  c = signatures.get_config("r3_rag")
  assert (c.world.train_worlds, c.world.name_lexicon, c.model.hidden_size) == (16, 480, 128)
  assert c.world.max_hops == 3 and c.cold_start.max_questions == 1200 and c.r3.sft_epochs == 5
  c = signatures.get_config("ur2")
  assert "very_hard" in c.ablation.a and "mode='uniform'" in c.ablation.a
  assert c.data.stages.ur2_curriculum.substitute.to_dict() == {"qa": {"easy": "medium"},
                                                               "mcq": {"easy": "medium"}}
  assert (c.world.num_test, c.trainer.num_steps, c.optim.total_steps) == (400, 120, 120)
  c = signatures.get_config("combined")      # AutoRefine's world and cold start, all parts on
  from ragjax.recipes.world import start_fingerprint
  assert start_fingerprint(c) == start_fingerprint(signatures.get_config("autorefine"))
  assert c.rl.rewards.to_dict() == {"autorefine": 1.0, "search_retry": 0.1}
  assert c.rex_rag.pool == "search" and c.rollout.hooks.rex_rag_clone.p == c.rex_rag.p > 0
  assert c.ablation.a == "autorefine_alone:rex_rag.p=0.0;rl.rewards.search_retry=0.0"
  assert all(not signatures.get_config(m).trainer.keep_best for m in signatures.VARIANTS)
