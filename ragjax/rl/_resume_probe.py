"""A tiny end-to-end RL run used to test exact resume across a SIGKILL.

  python -m ragjax.rl._resume_probe --workdir D --steps 6 [--pause_after 3] [--override k=v ...]

Runs the real Trainer (GRPO by default; `--override rl.advantage=gae` for PPO) on the tiny
preset with SimpleRollout, and writes `final.npz` (params + last metrics) at the end.  With
`--pause_after K` it prints `CHECKPOINTED K` once step K's checkpoint is on disk and then blocks,
so a test can kill it with SIGKILL at a known point.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.models.presets import get_preset  # noqa: E402
from ragjax.rl.config import config_fingerprint, parse_run_config  # noqa: E402
from ragjax.rl.rewards import register_reward  # noqa: E402
from ragjax.rl.simple_rollout import SimpleRollout  # noqa: E402
from ragjax.rl.trainer import Trainer  # noqa: E402

CORPUS = ["Paris is the capital of France.", "Berlin is in Germany.", "Rome is old.",
          "Oslo is cold.", "Lima is in Peru."]


@register_reward("probe_vowels")
def probe_vowels(response, golden, metadata):
  """A dense reward (share of vowels in the sampled text) so every group has signal."""
  text = response.lower()
  return sum(ch in "aeiou" for ch in text) / max(len(text), 1)


def probe_config(overrides=()):
  from ml_collections import ConfigDict
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "configs"))
  import search_r1  # noqa: E402
  c = search_r1.get_config("tiny")
  c.rl.update(group_size=4, mini_batch_size=4, micro_batch_size=2, kl_coef=0.01,
              entropy_coef=0.001, rewards={"probe_vowels": 1.0, "em": 1.0}, logprob_chunk=200)
  c.optim.update(lr=3e-3, warmup_steps=2, schedule="cosine", total_steps=24)
  c.critic_optim = ConfigDict(dict(c.optim.to_dict()))
  c.trainer.update(batch_prompts=2, save_every=1, eval_every=2, eval_prompts=8, progress=False)
  for ov in overrides:
    key, value = ov.split("=", 1)
    try:
      value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      pass
    node = c
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    node[leaf] = value
  return c


def build_trainer(workdir: str, steps: int, overrides=()):
  c = probe_config(overrides)
  c.trainer.workdir, c.trainer.num_steps = workdir, steps
  run = parse_run_config(c)
  cfg = get_preset("tiny")
  params = init_params(cfg, jax.random.PRNGKey(run.trainer.seed))
  critic = init_params(cfg, jax.random.PRNGKey(run.trainer.seed + 7), head="value") \
      if run.rl.uses_critic else None
  train = [{"id": f"t{i}", "question": f"q{i}: where?", "golden_answers": ["Paris"]}
           for i in range(5)]
  # 8 dev prompts = 8 training trajectories, so evaluation reuses the compiled sampler
  dev = [{"id": f"d{i}", "question": f"dev {i}?", "golden_answers": ["Rome"]} for i in range(8)]
  rollout = SimpleRollout(cfg, CORPUS, prompt_len=8, n1=5, doc_len=5, n2=5)
  return Trainer(model_cfg=cfg, run=run, params=params, rollout_fn=rollout, train_data=train,
                 dev_data=dev, fingerprint=config_fingerprint(c), critic_params=critic)


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--steps", type=int, required=True)
  ap.add_argument("--pause_after", type=int, default=0)
  ap.add_argument("--override", action="append", default=[])
  args = ap.parse_args(argv)
  trainer = build_trainer(args.workdir, args.steps, args.override)

  def on_ckpt(step):
    if step == args.pause_after:
      print(f"CHECKPOINTED {step}", flush=True)
      while True:           # wait to be killed
        time.sleep(60)
  trainer.train(on_checkpoint=on_ckpt)
  flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
          for path, v in jax.tree_util.tree_flatten_with_path(trainer.state.params)[0]}
  np.savez(os.path.join(args.workdir, "final.npz"), **flat)
  print("DONE", flush=True)


if __name__ == "__main__":
  main()
