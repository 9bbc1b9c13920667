"""REX-RAG (Jiang et al. 2025): GRPO with probe clones of wrong answers, a trajectory filter and
a mixture-corrected ratio (shared/research/seeds_rex_autorefine_r3.md §1).

  --config=configs/rex_rag.py:tiny         tiny policy on the synthetic world (cold-start SFT,
                                           BM25), CPU smoke run
  --config=configs/rex_rag.py:world        the embedded default (configs/world.py) + REX-RAG,
                                           for A/B runs against plain GRPO at the world's scale
  --config=configs/rex_rag.py:qwen2.5-3b   the paper's GRPO recipe
  --config=configs/rex_rag.py:qwen2.5-7b
  --config=configs/rex_rag.py:dapo-3b      the DAPO scripts: clip 0.2 / 0.28, keep ratio 0.12
  --config=configs/rex_rag.py:smollm2      SmolLM2-135M on HotpotQA (configs/smollm2.py's model,
                                           data and sizes; `smollm2-tiny`: CI)

Real sizes need `model.checkpoint`, `data.train_files` / `data.dev_files` (NQ + HotpotQA train)
and `retriever.index` or `retriever.url`, as configs/search_r1.py.

The method is the GRPO recipe plus four registered parts, all switched from `rex_rag`:
  rollout.hooks.rex_rag_clone   a wrong answer (EM 0) of an original row, in a turn where search
                                is still allowed, is cloned with probability p: answer deleted,
                                an exploration prompt inserted (trained on: rl.train_on has
                                "injected"), decoding resumed in the same KV cache.  Spare
                                sampler rows are sized per run from p and the row count
                                (rollout.spare_rows=-1: rows x p + 4 sd); a clone wanted when
                                none is left is skipped and counted (rex_rag/overflow).
  rl.batch_filter "rex_rag"     keeps the int(B x G x keep_ratio) clones with the likeliest
                                inserted prompt under pi_old; keep_ratio = EWM(alpha 0.1) of
                                [keep_ratio, kept-probe accuracy per step ...] in the checkpoint
  rl.behaviour "rex_rag"        log mu = log((1 - a) pi_old + a pi_eps) replaces log pi_old in
                                the clipped loss (Eq. 12 as the authors' code computes it)
  rl.metrics "rex_rag"          clones made / kept / overflowed, z, a, keep ratio, accuracies,
                                mu / pi_old by segment
Kept clones keep their prompt's uid, so they enlarge its GRPO group.  The update sees a
variable row count: mini-batches of rl.mini_batch_size rows, the last one filled up with rows
that train on nothing (ragjax.rl.trainer).

Ablations, one switch each (`--config.rex_rag.<field>=...`):
  p=0.12                      resampling probability (Table 4; 20/101 is the code's 20%)
  pool=five                   the 5-prompt pool 1, 11, 12, 14, 24 (Table 5)
  importance_sampling=False   the plain PPO ratio pi / pi_old ("w/o IS")
  ppd=coarse                  probe prompt tokens: 1/|pool| for the first, 1 after ("Coarse PPD")
  trajectory_filter=False     keep every clone ("w/o TF")
  adaptive_keep=False         keep a fixed share (keep_ratio) of B x G clones each step, the
                              reading of Table 4 ("+12% <- 20%"); the default is the authors'
                              code's EWM, which produced the tables
  the `dapo-3b` argument      clip-higher 0.28 and initial keep ratio 0.12 (the DAPO scripts)
Hyperparameters of the real sizes: seeds §1.4 table (512 prompts x 5, mini-batch 256
trajectories, lr 1e-6 with warmup ratio 0.285, KL 0.001 low_var_kl as a loss, clip 0.2, 5 turns,
500 tokens per turn and per observation, top-3, 1005 steps, seed 20020717).
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)
world_config = sibling(__file__, "world")  # (configs/world.py: the embedded default)
smollm2 = sibling(__file__, "smollm2")  # (configs/smollm2.py: the real model on a CPU)

ARGS = ("tiny", "world", "qwen2.5-3b", "qwen2.5-7b", "dapo-3b")   # and smollm2.VARIANTS


def plan(c):
  """Derived quantities beyond ragjax.planning.plan's: the evaluation protocol (`--suite
  rex_rag`: 5 turns, as trained) and the clone / filter settings."""
  from ragjax.planning.plan import eval_plan
  out = eval_plan(c, "rex_rag")
  r = c.get("rex_rag")
  if r is not None:
    out.update(resample_p=r.p, keep_ratio_initial=r.keep_ratio, keep_ratio_rule=(
        f"ewm(alpha={r.ewm_alpha})" if r.adaptive_keep else "fixed"),
               keep_multiple=r.keep_multiple)
  return out


def rex_rag_section(keep_ratio: float = 0.08):
  """The method's switches; the plug-in kwargs below refer to them (one place to change)."""
  return common.ConfigDict(dict(
      p=20 / 101,                 # random.randint(0, 100) < 20 in the authors' code
      pool="all",                 # "all" (30 prompts) | "five" (Table 5) | "search" (world)
      keep_ratio=keep_ratio,      # the keep-ratio history's first value
      ewm_alpha=0.1,
      adaptive_keep=True,         # the code's EWM keep ratio; False: a fixed share (Table 4)
      keep_multiple=1,            # keep_num rounded down to a multiple (the code: GPU count)
      trajectory_filter=True,
      importance_sampling=True,
      ppd="ngram"))               # "ngram" (Algorithm 1) | "coarse"


def add_rex_rag(c, keep_ratio: float = 0.08):
  """REX-RAG's deltas on top of a GRPO config."""
  c.rex_rag = rex_rag_section(keep_ratio)
  r = c.rex_rag
  c.rollout.spare_rows = -1
  c.rollout.hooks = {"rex_rag_clone": {"p": r.get_ref("p"), "pool_name": r.get_ref("pool")}}
  c.rl.train_on = ("policy", "injected")     # the inserted prompt is trained on (component 5)
  c.rl.use_sampler_logprobs = False          # pi_old of inserted tokens needs a re-scored forward
  c.rl.batch_filter = "rex_rag"
  c.rl.batch_filter_kwargs = {"keep_ratio": r.get_ref("keep_ratio"),
                              "alpha": r.get_ref("ewm_alpha"),
                              "enabled": r.get_ref("trajectory_filter"),
                              "multiple_of": r.get_ref("keep_multiple"),
                              "adaptive": r.get_ref("adaptive_keep")}
  c.rl.behaviour = "rex_rag"
  c.rl.behaviour_kwargs = {"pool_name": r.get_ref("pool"), "ppd": r.get_ref("ppd"),
                           "importance_sampling": r.get_ref("importance_sampling")}
  c.rl.metrics = ("rex_rag",)
  return c


def small_config(arg: str):
  """`tiny`: the world's toy sizes, GRPO recipe with a cold start; `world`: the embedded
  default itself (its recipe evaluates by question type) with REX-RAG added."""
  c = world_config.get_config("toy" if arg == "tiny" else "default")
  c.workdir = f"runs/rex_rag_{arg}"
  add_rex_rag(c)
  if arg == "world":
    return c
  c.recipe = "rl"             # GRPO only; the cold start runs because sft.steps > 0
  c.retriever.backend = "bm25"
  # A cold start long enough that the tiny policy answers in tags (wrong, mostly), so clones
  # happen: about half of the rows answer before the final turn after 80 steps.
  c.sft.update(dict(steps=80, lr=2e-2, warmup_steps=4, log_every=10))
  c.rl.update(dict(group_size=4, kl_coef=0.001, mini_batch_size=32, micro_batch_size=0))
  c.rl.rewards = {"em": 1.0}
  c.optim.update(dict(lr=1e-3, total_steps=0))
  c.trainer.update(dict(num_steps=4, batch_prompts=4, eval_every=2, eval_prompts=8,
                        save_every=1, max_to_keep=2, keep_best=False))
  return c


def smollm2_config(arg: str):
  """`smollm2` / `smollm2-tiny`: configs/smollm2.py (default / tiny) with REX-RAG's four parts;
  its trajectory filter replaces smollm2's dynamic sampling (one batch filter a run), and its
  reward stays smollm2's.  docs/methods/rex_rag.md says what else changes."""
  c = add_rex_rag(smollm2.variant("rex_rag", arg))
  c.rl.metrics = ("search_r1", "rex_rag")
  # log pi_old: the sampler's, as configs/smollm2.py takes it, except on the clones (they train
  # on their inserted prompt, which the sampler did not draw: those rows are re-scored).  The
  # paper's verl re-scores every row; on this CPU that forward cost 180 s of a 540 s step.
  c.rl.use_sampler_logprobs = True
  # the update runs only the rows with an advantage, on the whole batch's normalisers (the
  # same gradient; no KL loss here): most groups of a 135M policy score alike (on the first
  # step 45 of the 69 rows carried no advantage: the update runs 32 rows, not 72)
  c.rl.skip_zero_advantage_rows = True
  return c


def get_config(arg: str = "tiny"):
  arg = (arg or "tiny").lower()
  if arg in smollm2.VARIANTS:
    return smollm2_config(arg)
  if arg not in ARGS:
    raise ValueError(f"unknown config argument {arg!r}; use one of "
                     f"{[*ARGS, *smollm2.VARIANTS]}")
  if arg in ("tiny", "world"):
    return small_config(arg)
  dapo = arg.startswith("dapo")
  size = "qwen2.5-3b" if dapo else arg
  c = common.get_config()
  c.recipe = "rl"
  c.seed = 20020717
  c.workdir = f"runs/rex_rag_{arg}"
  c.hardware = "a800x8"          # "a cluster of 8 NVIDIA A800 80GB GPUs" (Appendix C)
  c.model.update(dict(preset=size, checkpoint="", dtype="bfloat16", param_dtype="float32",
                      scan_layers=True, remat=True))
  c.data.source = "files"
  c.protocol = common.protocol("rex_rag", "top_k", "max_turns", "obs_max_tokens")
  c.sampler.update(dict(max_cache_length=4096, max_new_tokens=500, temperature=1.0, top_p=1.0,
                        prompt_buckets=(64, 128, 256, 512, 1024, 2048)))
  c.rollout.widths = (512, 1024, 2048, 3072, 4096)
  c.rollout.kv_budget_gb = 24.0     # per device: rollouts run in waves (see --dry_run)
  c.rl.update(dict(
      advantage="grpo", group_size=5, clip_low=0.2, clip_high=0.28 if dapo else 0.2,
      loss_agg="token-mean", kl_coef=0.001, kl_estimator="k3", kl_in_reward=False,
      entropy_coef=0.0, logprob_chunk=8192, ppo_epochs=1,
      mini_batch_size=256, micro_batch_size=8))
  c.rl.rewards = {"em": 1.0}
  add_rex_rag(c, keep_ratio=0.12 if dapo else 0.08)
  c.rex_rag.keep_multiple = 8    # ray_trainer.py: keep_num less keep_num % n_gpus_per_node (8)
  # 2560 originals + the kept clones (~8-12%) in mini-batches of 256: 10 + 1 or 2 optimiser
  # updates per RL step; verl steps its LR scheduler once per RL step (optim.clock "rl_step"),
  # so warmup is int(0.285 x 1005) = 286 RL steps whatever the clones add.
  c.optim.update(dict(lr=1e-6, schedule="constant", warmup_ratio=0.285, clock="rl_step",
                      total_steps=0, weight_decay=0.01, grad_clip=1.0))
  c.trainer.update(dict(num_steps=1005, batch_prompts=512, eval_every=50, eval_prompts=500,
                        save_every=50, max_to_keep=2, keep_best_metric="dev/em"))
  c.eval.batch_size = 64
  c.eval.method = "REX-RAG"      # its row in configs/paper_results.json (`--suite rex_rag`)
  common.pin_wiki18_e5(c)        # App. C.3 and scripts/search_engine/build_index.sh (Flat)
  return c
