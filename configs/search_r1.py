"""Search-R1 recipe (GRPO or PPO, EM reward, retrieved tokens masked), at tiny and real sizes.

  --config=configs/search_r1.py:tiny            tiny policy, CPU smoke run
  --config=configs/search_r1.py:tiny-ppo
  --config=configs/search_r1.py:qwen2.5-3b      Search-R1 paper GRPO recipe
  --config=configs/search_r1.py:qwen2.5-7b-ppo  Search-R1 paper PPO recipe (critic + GAE)

Hyperparameters follow the Search-R1 scripts as summarised in
shared/research/anchors_rag_rl.md §1.1 and seeds_rex_autorefine_r3.md §0.2: 512 prompts x 5,
lr 1e-6, warmup ratio 0.285, KL 0.001 (k3 = low_var_kl, as a loss), token-mean, clip 0.2,
temperature 1, 4 turns, 500 tokens per turn and per observation, top-3 retrieval, 1005 steps.
"""

from ml_collections import ConfigDict

SIZES = ("tiny", "qwen2.5-3b", "qwen2.5-7b")


def get_config(arg: str = "tiny") -> ConfigDict:
  arg = (arg or "tiny").lower()
  algo = "ppo" if arg.endswith("-ppo") else "grpo"
  size = arg[:-4] if algo == "ppo" else arg
  if size not in SIZES:
    raise ValueError(f"unknown config argument {arg!r}; use one of "
                     f"{[s + v for s in SIZES for v in ('', '-ppo')]}")
  tiny = size == "tiny"
  c = ConfigDict()
  c.method = "search_r1"

  c.model = ConfigDict(dict(
      preset=size,                 # a preset name or a checkpoint dir (its config.json wins)
      checkpoint="",               # HF safetensors dir to start from ("" = random init)
      dtype="float32" if tiny else "bfloat16",
      param_dtype="float32",
      scan_layers=not tiny,
      remat=not tiny,
  ))

  c.rl = ConfigDict(dict(
      advantage="gae" if algo == "ppo" else "grpo",
      group_size=1 if algo == "ppo" else 5,
      adv_eps=1e-6,
      clip_low=0.2, clip_high=0.2, dual_clip=None,
      loss_agg="token-mean",
      kl_coef=0.001,
      kl_estimator="k3",
      kl_in_reward=algo == "ppo",  # verl PPO: KL penalty in the reward; GRPO: KL loss
      entropy_coef=0.0,
      value_clip=0.2,
      gamma=1.0, lam=1.0,
      train_on=("policy",),
      use_sampler_logprobs=False,
      temperature=1.0,
      logprob_chunk=8192,
      ppo_epochs=1,
      # verl multiplies ppo_mini_batch_size (256 prompts) by the group size: 2 optimiser steps
      # per RL step for GRPO; PPO samples once per prompt.
      mini_batch_size=((10 if algo == "grpo" else 2) if tiny
                       else (256 * 5 if algo == "grpo" else 256)),
      micro_batch_size=((5 if algo == "grpo" else 1) if tiny else 8),
      rewards={"search_r1_em": 1.0},
      reward_kwargs={},
  ))

  c.optim = ConfigDict(dict(
      lr=1e-3 if tiny else 1e-6, schedule="constant", warmup_steps=0, warmup_ratio=0.285,
      min_lr_ratio=0.0, total_steps=20 if tiny else 1005 * 2, b1=0.9, b2=0.999, eps=1e-8,
      weight_decay=0.01, grad_clip=1.0))
  c.critic_optim = None
  if algo == "ppo":
    c.critic_optim = ConfigDict(dict(
        lr=1e-3 if tiny else 1e-5, schedule="constant", warmup_steps=0, warmup_ratio=0.015,
        min_lr_ratio=0.0, total_steps=20 if tiny else 1005 * 2, b1=0.9, b2=0.999, eps=1e-8,
        weight_decay=0.01, grad_clip=1.0))

  c.trainer = ConfigDict(dict(
      seed=0, num_steps=10 if tiny else 1005, batch_prompts=4 if tiny else 512,
      eval_every=5 if tiny else 50, eval_prompts=16 if tiny else 500, save_every=5 if tiny else 50,
      max_to_keep=2, keep_best_metric="dev/em", workdir=f"/tmp/ragjax/search_r1_{arg}",
      progress=True, tensorboard=True))

  c.data = ConfigDict(dict(
      # "world": the synthetic search world (CPU smoke runs); "files": the files below.
      source="world" if tiny else "files",
      # Search-R1 trains on NQ + HotpotQA train (FlashRAG jsonl or verl parquet paths).
      train_files=(), dev_files=(),                  # keep-best is chosen on dev, never test
      test=("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"),
  ))
  # Only read when data.source == "world".
  c.world = ConfigDict(dict(seed=0, train_worlds=1, num_train=64, num_dev=16, num_test=16,
                            num_people=30, num_places=10, num_orgs=8, num_works=12,
                            retry_groups=6))
  c.tokenizer = ConfigDict(dict(vocab_size=1024))
  c.retrieval = ConfigDict(dict(backend="bm25", encoder_dir="", cache_size=4096))
  c.progress = True

  c.rollout = ConfigDict(dict(
      protocol="search_r1", max_turns=4, max_response_length=500, max_obs_length=500,
      max_start_length=2048, max_prompt_length=4096, temperature=1.0, top_p=1.0,
      eval_greedy=True))

  # A Search-R1 retrieval server (`python -m ragjax.retrieval.serve`) or an index directory.
  c.retriever = ConfigDict(dict(kind="e5", url="", index="", topk=3))
  if tiny:
    c.rollout.update(max_turns=2, max_response_length=32, max_obs_length=64,
                     max_start_length=512, max_prompt_length=768)
    c.retriever.update(kind="exact", topk=2)
  return c
