"""Search-R1 recipe (GRPO or PPO, EM reward, retrieved tokens masked), at tiny and real sizes.

  --config=configs/search_r1.py:tiny            tiny policy on the synthetic world, CPU smoke run
  --config=configs/search_r1.py:tiny-ppo
  --config=configs/search_r1.py:qwen2.5-3b      Search-R1 paper GRPO recipe
  --config=configs/search_r1.py:qwen2.5-7b-ppo  Search-R1 paper PPO recipe (critic + GAE)

Real sizes need `model.checkpoint` (an HF directory), `data.train_files` / `data.dev_files`
(FlashRAG jsonl or verl parquet: NQ + HotpotQA train) and `retriever.index` or
`retriever.url` (a Search-R1 /retrieve server).  Hyperparameters follow the Search-R1 scripts
as summarised in shared/research/anchors_rag_rl.md §1.1 and seeds_rex_autorefine_r3.md §0.2:
512 prompts x 5, lr 1e-6, warmup ratio 0.285, KL 0.001 (k3 = low_var_kl, as a loss), the
token mean of each 8-sequence micro-batch averaged over them (verl), clip 0.2, temperature 1,
top-p 0.95 (GRPO; PPO 1.0), 4 turns, 500 tokens per turn and per observation, top-3
retrieval, 1004 steps (verl's loop of `total_training_steps=1005`); PPO whitens its GAE
advantages over the response and clips values at 0.5, its critic covers every response token
and its value head starts at N(0, 0.02^2).  The ledger:
docs/methods/search_r1.md.  The schema and its other defaults are in configs/common.py.
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)

SIZES = ("tiny", "qwen2.5-3b", "qwen2.5-7b")
ARGS = tuple(s + v for s in SIZES for v in ("", "-ppo"))     # every valid config argument



def plan(c):
  """Derived quantities beyond ragjax.planning.plan's: the evaluation protocol of `--suite
  search_r1`."""
  from ragjax.planning.plan import eval_plan
  return eval_plan(c, "search_r1")

def get_config(arg: str = "tiny"):
  arg = (arg or "tiny").lower()
  algo = "ppo" if arg.endswith("-ppo") else "grpo"
  size = arg[:-4] if algo == "ppo" else arg
  if size not in SIZES:
    raise ValueError(f"unknown config argument {arg!r}; use one of {list(ARGS)}")
  tiny = size == "tiny"
  c = common.get_config()
  c.recipe = "rl"
  c.workdir = f"runs/search_r1_{arg}"
  c.hardware = "" if tiny else "h100x8"      # Search-R1 trained on 8 H100s
  c.model.update(dict(preset=size, checkpoint="", dtype="float32" if tiny else "bfloat16",
                      param_dtype="float32", scan_layers=not tiny, remat=not tiny))

  c.rl.update(dict(
      advantage="gae" if algo == "ppo" else "grpo", group_size=1 if algo == "ppo" else 5,
      clip_low=0.2, clip_high=0.2, kl_coef=0.001,
      entropy_coef=0.001,    # verl's actor.entropy_coeff default; the scripts keep it
      # verl PPO: KL penalty in the reward, algorithm.kl_penalty "kl" (k1); GRPO: a KL loss,
      # kl_loss_type low_var_kl (k3)
      kl_in_reward=algo == "ppo", kl_estimator="k1" if algo == "ppo" else "k3",
      gamma=1.0, lam=1.0, use_sampler_logprobs=False, logprob_chunk=8192,
      ppo_epochs=1,
      # verl's ppo_mini_batch_size counts sequences of the expanded batch (fsdp_workers.py
      # multiplies it by rollout.n, which is 1: groups come from n_agent=5), so 512 x 5 rows
      # in mini-batches of 256 make 10 optimiser updates per RL step (GRPO); PPO's 512 rows
      # make 2.  `--dry_run` prints the derived plan against the paper's.
      mini_batch_size=((10 if algo == "grpo" else 2) if tiny else 256),
      micro_batch_size=((5 if algo == "grpo" else 1) if tiny else 8)))
  if not tiny:   # verl as the scripts run it (the tiny configs keep their flat token mean)
    c.rl.update(dict(
        # dp_actor: each micro-batch's token mean / gradient-accumulation steps; the scripts'
        # ppo_micro_batch_size 64 is global, 8 sequences per GPU on 8 GPUs (fsdp_workers.py)
        loss_agg="token-mean-per-micro-batch", loss_agg_rows=8,
        # the critic's ppo_micro_batch_size 8 is 1 sequence per GPU: a per-sequence mean
        critic_loss_agg="seq-mean-token-mean" if algo == "ppo" else "",
        # compute_gae_advantage_return ends with masked_whiten; cliprange_value 0.5
        adv_whiten="verl" if algo == "ppo" else "", value_clip=0.5))
    if algo == "ppo":   # verl's critic: every response token (retrieved ones too) is valued,
      # run through GAE, whitened over and regressed on (ray_trainer.py:130-137,
      # dp_critic.py:136,178); AutoModelForTokenClassification's head starts at N(0, 0.02^2)
      c.rl.update(dict(critic_mask="response", adv_whiten_mask="response",
                       value_head_init="verl"))
  c.rl.rewards = {"search_r1_em": 1.0}
  # verl steps its LR scheduler once per RL step: warmup int(0.285 x 1004) = 286 RL steps
  # (optim.clock "rl_step"; total_steps 0 = the run's RL steps; verl's 1005 gives the same
  # 286), its constant schedule's factor min(1, step / max(1, warmup)) (min_warmup_steps 1)
  c.optim.update(dict(lr=1e-3 if tiny else 1e-6, schedule="constant", warmup_ratio=0.285,
                      clock="rl_step", total_steps=0, weight_decay=0.01, grad_clip=1.0,
                      min_warmup_steps=0 if tiny else 1))
  if algo == "ppo":
    c.critic_optim = common.ConfigDict(dict(
        lr=1e-3 if tiny else 1e-5, schedule="constant", warmup_steps=0, warmup_ratio=0.015,
        min_warmup_steps=0 if tiny else 1, min_lr_ratio=0.0, clock="rl_step", total_steps=0,
        b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, grad_clip=1.0))
  c.trainer.update(dict(
      # total_training_steps=1005, but verl's loop exits when its incremented step counter
      # reaches it (ray_trainer.py:843-845): 1,004 steps train
      num_steps=10 if tiny else 1004, batch_prompts=4 if tiny else 512,
      eval_every=5 if tiny else 50, eval_prompts=16 if tiny else 500,
      save_every=5 if tiny else 50, max_to_keep=2, keep_best_metric="dev/em"))

  # Search-R1 trains on NQ + HotpotQA train; keep-best is chosen on dev, never test.
  c.data.source = "world" if tiny else "files"
  # the 500-token cap cuts the whole "\n\n<information>...</information>\n\n" string, as
  # generation.py:87-89 does (the tiny configs keep the protocol's default: they cut the
  # documents and keep the tags)
  c.protocol = common.protocol("search_r1", "top_k", "max_turns", "obs_max_tokens",
                               **({} if tiny else {"obs_cap": "observation"}))
  # top-p: verl's rollout default 0.95 (ppo_trainer.yaml), which train_grpo.sh keeps and
  # train_ppo.sh sets to 1.0
  c.sampler.update(dict(max_cache_length=4096, max_new_tokens=500, temperature=1.0,
                        top_p=0.95 if algo == "grpo" and not tiny else 1.0,
                        prompt_buckets=(64, 128, 256, 512, 1024, 2048)))
  c.rollout.widths = (512, 1024, 2048, 3072, 4096)
  c.rollout.kv_budget_gb = 24.0     # per device: rollouts run in waves (see --dry_run)
  c.eval.batch_size = 64
  # The published row `python -m ragjax.evaluate --suite search_r1` compares with
  # (configs/paper_results.json; the size is model.preset).
  c.eval.method = "" if tiny else "Search-R1-base"
  if not tiny:   # retrieval_launch.sh: e5-base-v2, e5_Flat.index over wiki-18.jsonl
    common.pin_wiki18_e5(c)
  if tiny:   # the synthetic world (no weights or corpus to download), BM25, short turns
    common.tiny_world(c)
    common.tiny_rollout(c)
  return c
