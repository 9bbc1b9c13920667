"""`configs/combined.py:tiny` end to end through `python -m ragjax.train`: AutoRefine's
protocol and reward, ReZero's retry reward and REX-RAG's probes in one run of the real engine
and trainer (cold start, then RL), each part seen working in the run's metrics log; and the
protocol-agnostic retry reward by hand."""

import math
import os
import sys
from types import SimpleNamespace

import pytest

from _rl_helpers import logged_metrics
from _xla_helpers import xla_flags
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
STEPS = 2


def test_search_retry_by_hand():
  """ReZero's min(1, 0.2 + 0.15 min(n, 5)) over the searches after the first of an answered
  row (one search per turn on tag protocols); 0 without an answer."""
  from ragjax.rl.rewards import RewardContext, get_reward
  retry = get_reward("search_retry")

  def ctx(answer, searches):
    return RewardContext(SimpleNamespace(answer=answer, num_searches=searches), {})
  assert retry(ctx("x", 1)) == 0.0                                  # no retry
  assert retry(ctx("x", 2)) == 0.35                                 # 0.2 + 0.15 x 1
  assert retry(ctx("x", 4)) == 0.65                                 # 0.2 + 0.15 x 3
  assert retry(ctx("x", 9)) == 0.95                                 # n capped at 5
  assert retry(ctx(None, 4)) == 0.0                                 # unanswered
  assert retry(ctx("x", 2), retry_counting="all_searches") == 0.5   # 0.2 + 0.15 x 2
  with pytest.raises(ValueError, match="retry_counting"):
    retry(ctx("x", 2), retry_counting="every")


def test_tiny_runs_the_three_methods_together(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS + os.pathsep + ROOT,
             XLA_FLAGS=xla_flags(1))
  work = str(tmp_path / "w")
  # every wrong answer cloned (p = 1), so the probes run within two steps
  p = preloaded.run([sys.executable, "-m", "ragjax.train", "--config=configs/combined.py:tiny",
                      "--config.progress=False", "--config.rex_rag.p=1.0",
                      "--config.trainer.eval_every=0", f"--config.trainer.num_steps={STEPS}",
                      f"--config.workdir={work}"], cwd=ROOT, env=env, capture_output=True,
                    text=True, timeout=1200)
  assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
  m = logged_metrics(work)
  assert [r["step"] for r in m] == list(range(1, STEPS + 1))
  for r in m:
    for key in ("reward/autorefine", "reward/search_retry", "autorefine/search_success",
                "autorefine/refine_success", "rex_rag/clones_made", "rex_rag/clones_kept"):
      assert key in r and math.isfinite(r[key]), key
  assert sum(r["rex_rag/clones_made"] for r in m) >= 1           # REX-RAG's probes ran
  assert sum(r["searches_per_traj"] for r in m) > 0               # the policy searched
  assert os.path.isdir(os.path.join(work, "policy"))
