"""A tiny end-to-end RL run through the real engine, used to test the trainer and exact resume.

  python tests/resume_probe.py --workdir D --steps 6 [--pause_after 3] [--override k=v ...]

Builds the real Trainer with `ragjax.wiring.components.make_trainer` from the
`configs/search_r1.py:tiny` config (GRPO by default; `--override rl.advantage=gae` for PPO):
the JAX Sampler on the tiny preset, the Search-R1 protocol, the multi-turn engine and a real
BM25 index over the test passages, and writes `final.npz` (params) at the end.  With
`--pause_after K` it prints `CHECKPOINTED K` once step K's checkpoint is on disk and then
blocks, so a test can kill it with SIGKILL at a known point.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import _rollout_helpers as h  # noqa: E402
from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.models.presets import get_preset  # noqa: E402
from ragjax.wiring import components  # noqa: E402
from ragjax.wiring.config_files import apply_overrides, load_config  # noqa: E402
from ragjax import registry  # noqa: E402


@registry.register("reward", "probe_vowels")
def probe_vowels(ctx):
  """A dense reward (share of vowels in the sampled text) so every group has signal."""
  text = ctx.row.policy_text.lower()
  return sum(ch in "aeiou" for ch in text) / max(len(text), 1)


def probe_config(workdir: str, steps: int, overrides=()):
  from ml_collections import ConfigDict
  c = load_config("configs/search_r1.py:tiny")
  c.workdir, c.progress = workdir, False
  c.rl.update(group_size=4, mini_batch_size=4, micro_batch_size=2, kl_coef=0.01,
              entropy_coef=0.001, logprob_chunk=200)
  c.rl.rewards = {"probe_vowels": 1.0, "em": 1.0}
  c.optim.update(lr=3e-3, warmup_steps=2, schedule="cosine", total_steps=24)
  c.critic_optim = ConfigDict(dict(c.optim.to_dict()))
  c.trainer.update(num_steps=steps, batch_prompts=2, save_every=1, eval_every=2, eval_prompts=8,
                   tensorboard=True)
  c.protocol.update(top_k=1, max_turns=2, obs_max_tokens=12)
  c.sampler.update(max_cache_length=384, max_new_tokens=6, prompt_buckets=(256,),
                   extend_buckets=(16, 32, 64))
  c.rollout.widths = (320, 384)
  return apply_overrides(c, overrides)


def build_trainer(workdir: str, steps: int, overrides=()):
  c = probe_config(workdir, steps, overrides)
  run = components.validate(c)
  tok = h.tokenizer(chat=True)
  cfg = get_preset("tiny").replace(eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
  params = init_params(cfg, jax.random.PRNGKey(c.seed))
  train = [{"id": f"t{i}", "question": q, "golden_answers": ["Quillport"]}
           for i, q in enumerate(["capital of Zorbland", "harbour of Zorbland", "where is the "
                                  "observatory", "river through Quillport", "largest city"])]
  # 8 dev prompts = 8 training trajectories, so evaluation reuses the compiled sampler shapes
  dev = [{"id": f"d{i}", "question": f"dev question {i}", "golden_answers": ["Amber Sea"]}
         for i in range(8)]
  setup = components.Setup({"train": train, "dev": dev}, h.bm25_retriever(), tok)
  return components.make_trainer(c, run, cfg, params, tok, setup)


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
