"""LoRA through the real trainer (engine, sampler, BM25, orbax): only the adapters are trained,
optimised and checkpointed; the base stays bit-identical and is the KL reference (adapters
disabled); the sampler decodes with the merged weights; a resumed run restores the adapters."""

import json
import os

import jax
import numpy as np

from resume_probe import build_trainer
from ragjax.models.lora import LoraConfig, merge

LORA = ["model.lora.rank=4", "model.lora.alpha=8.0", "trainer.eval_every=0",
        "optim.lr=0.05", "optim.warmup_steps=0", "optim.schedule='constant'"]


def leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_only_adapters_train_and_are_checkpointed_reference_is_the_base(tmp_path):
  work = str(tmp_path)
  t = build_trainer(work, 2, LORA)
  base0 = leaves(t.frozen)
  hist = t.train()
  flat = jax.tree_util.tree_flatten_with_path(t.state.params)[0]
  assert flat and all(str(p[-1].key) in ("lora_a", "lora_b") for p, _ in flat)
  assert max(np.abs(np.asarray(x)).max() for p, x in flat if p[-1].key == "lora_b") > 0
  for a, b in zip(base0, leaves(t.frozen)):
    np.testing.assert_array_equal(a, b)
  assert t.ref_params is t.frozen
  # step 1 rolls out and scores with B = 0, i.e. the base: the KL to the reference starts at 0
  assert abs(hist[0]["kl"]) < 1e-6 and hist[1]["kl"] > 1e-6
  # the sampler decodes with base + adapters merged
  merged = merge(t.frozen, t.state.params, LoraConfig(rank=4, alpha=8.0))
  t._rollout(t.eval_engine, t.dev_data[:1], [0], 1, jax.random.PRNGKey(0))
  for a, b in zip(leaves(merged), leaves(t.eval_engine.sampler.params)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  for a, b in zip(leaves(merged), leaves(t.final_params())):
    np.testing.assert_allclose(a, b, atol=1e-6)
  # the checkpoint holds the adapters, their Adam moments, step and RNG: no base weight
  t.ckpt.close()
  with open(os.path.join(work, "rl", "latest", "2", "state", "_METADATA")) as f:
    keys = json.load(f)["tree_metadata"]
  arrays = [k for k in keys if ("params" in k and "hyperparams" not in k) or "'mu'" in k
            or "'nu'" in k]
  assert arrays and all("lora_" in k for k in arrays)
  # resume: the adapters come back
  again = build_trainer(work, 3, LORA)
  assert again.maybe_resume() == 2
  for a, b in zip(leaves(t.state.params), leaves(again.state.params)):
    np.testing.assert_array_equal(a, b)
  again.ckpt.close()
