"""The generic RL recipe (`c.recipe = "rl"`): RL (GRPO, PPO, ...) over the real engine for
every method that is a config plus plug-ins (Search-R1, AutoRefine, ReZero, REX-RAG, combined).

    python -m ragjax.train --config=configs/search_r1.py:tiny

Wires: checks -> data + retriever -> mesh -> policy (cold-started on the synthetic world when
`sft.steps` > 0) -> trainer (sampling engine, greedy dev engine, registry plug-ins named by the
config) -> train -> export the policy as an HF directory (`<workdir>/policy`), which
`python -m ragjax.evaluate` and transformers load.
"""

from __future__ import annotations

import os

from ragjax.wiring import components as parts


def start(c, world_cold_start: bool = True) -> parts.Start:
  """Data, retriever and the initial policy (what every arm of an ablation shares).  With
  `sft.steps` > 0 the policy is first cold-started on the synthetic world's scripted traces,
  as the embedded default's (`ragjax.recipes.world.start`, cached in the workdir): a tiny
  from-scratch policy then follows the protocol, so a method acting on its actions (REX-RAG
  clones wrong answers) has something to act on.  `world_cold_start=False`: the policy as
  loaded (a recipe with its own cold start, `ragjax.recipes.qa`)."""
  if c.sft.steps and world_cold_start:
    if c.data.source != "world":
      raise ValueError("sft.steps > 0 needs data.source='world' (the cold-start traces are "
                       "scripted from the world's hop chains)")
    if "traces" not in c:
      raise ValueError("sft.steps > 0 needs a `traces` section (the scripted cold-start "
                       "traces' shares, as configs/world.py sets); this config has none")
    from ragjax.recipes import world
    return world.start(c)
  workdir = os.path.abspath(c.workdir)
  os.makedirs(workdir, exist_ok=True)
  setup = parts.load_data(c, workdir)
  parts.log(f"data: { {s: len(v) for s, v in setup.splits.items()} } questions")
  mesh = parts.make_mesh(c)
  cfg, params, tok = parts.load_policy(c, setup.tokenizer, mesh)
  return parts.Start(setup, cfg, params, tok, mesh)


def run(c) -> dict:
  run_cfg = parts.validate(c)
  parts.check_resume(c)
  workdir = os.path.abspath(c.workdir)
  s = start(c)
  cfg, tok = s.cfg, s.tokenizer
  trainer = parts.make_trainer(c, run_cfg, cfg, s.params, tok, s.setup, s.mesh)
  history = trainer.train()
  params = trainer.final_params()
  trainer.ckpt.close()
  policy = parts.export_policy(os.path.join(workdir, parts.POLICY_DIR), cfg, params, tok)
  parts.log(f"trained {len(history)} steps; policy in {policy}")
  return {"steps": len(history), "workdir": workdir, "policy": policy,
          "last": history[-1] if history else {}}
