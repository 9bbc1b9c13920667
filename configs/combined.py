"""Methods combined on one recipe: AutoRefine's refine step and reward, ReZero's retry reward
and REX-RAG's probes, which no single paper's code can run together.

  --config=configs/combined.py:tiny     the world's toy sizes with a cold start (CPU smoke run)
  --config=configs/combined.py:world    the embedded default's scale, for `python -m ragjax.ablate`
                                        against each method alone
  --config=configs/combined.py:smollm2  SmolLM2-135M on HotpotQA (configs/smollm2.py's model, data
                                        and sizes; `smollm2-tiny`: CI), the same three parts

What each part contributes (each is one field away from off):
  protocol "autorefine"            `<documents>` then a `<refine>` block after every search
                                   (cold-start traces write it: `traces.refine`)
  rl.rewards.autorefine            AutoRefine's Eq. 3: the answer's F1, else 0.1 when a refine
                                   block holds the answer (`...autorefine.refine_score=0`: off)
  rl.rewards.search_retry          ReZero's retry reward on this protocol, for each search after
                                   the first of an answered row (`rl.rewards.search_retry=0`: off)
  rollout.hooks.rex_rag_clone,     REX-RAG's probe clones of wrong answers, the trajectory filter
  rl.batch_filter, rl.behaviour    and the mixture ratio pi / mu (`--config.rex_rag.p=0`: off)
Metrics: AutoRefine's search / refine success and REX-RAG's clone counts, every step.
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")
rex_rag = sibling(__file__, "rex_rag")
autorefine = sibling(__file__, "autorefine")
smollm2 = sibling(__file__, "smollm2")

ARGS = ("tiny", "world", *smollm2.VARIANTS)
RETRY_WEIGHT = 0.1      # ReZero weighs retry 1 against correctness 4: the same share of Eq. 3's 1


def add_rewards(c):
  """AutoRefine's Eq. 3 and ReZero's retry reward on a config with AutoRefine's protocol and
  REX-RAG's parts (`configs/rex_rag.py:add_rex_rag`), and both methods' metrics."""
  c.rl.rewards = {"autorefine": 1.0, "search_retry": RETRY_WEIGHT}
  c.rl.reward_kwargs = {"autorefine": {"refine_score": 0.1},
                        "search_retry": {"retry_counting": "after_first"}}
  c.rl.metrics = ("autorefine", "rex_rag")
  return c


def smollm2_config(arg: str):
  """`smollm2` / `smollm2-tiny`: configs/smollm2.py (default / tiny) with AutoRefine's protocol
  and `<refine>` cold start (`configs/autorefine.py:add_refine`), REX-RAG's parts (its filter
  in place of dynamic sampling) and the rewards above."""
  c = smollm2.variant("combined", arg)
  autorefine.add_refine(c)
  rex_rag.add_rex_rag(c)
  return add_rewards(c)


def get_config(arg: str = "tiny"):
  arg = common.config_arg(arg, ARGS)
  if arg in smollm2.VARIANTS:
    return smollm2_config(arg)
  c = rex_rag.small_config(arg)          # the world, its cold start and REX-RAG's parts
  c.workdir = f"runs/combined_{arg}"
  tiny = arg == "tiny"
  c.protocol = common.protocol(
      "autorefine", "refine", template="Question: {question}\n", top_k=c.protocol.top_k,
      max_turns=c.protocol.max_turns, obs_max_tokens=c.protocol.obs_max_tokens if tiny else 160)
  c.sampler.max_new_tokens = max(c.sampler.max_new_tokens, 48)   # a refine block and a search
  c.traces.refine = True
  c.traces.quote = False                 # the refine block is the reading step
  return add_rewards(c)
