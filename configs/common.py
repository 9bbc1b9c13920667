"""The config schema every recipe shares; each `configs/<recipe>.py` starts here and sets deltas.

    c = common.get_config()      # every section, with defaults
    c.recipe = "search_r1"
    c.rl.kl_coef = 0.001         # deltas only

Sections (all overridable on the command line, `--config.rl.kl_coef=0.01`; an unknown field is
an error naming it):
  recipe, seed, workdir, progress      which `ragjax.recipes.<recipe>` runs, and where
  hardware    the accelerators the paper used, the default `--dry_run --target`
  model       preset | checkpoint | a from-scratch shape; dtypes; scan / remat
  mesh        data, fsdp, tensor (one may be -1: the remaining devices)
  data        source "world" (the synthetic world below) or "files" (train/dev question files);
              data stages over the training records (curricula)
  world, tokenizer                     the synthetic world and its tokenizer (source "world")
  retriever   an index directory, a Search-R1 /retrieve URL, or (world) an index built here
  protocol    the search protocol (`name`) and its fields (top_k, max_turns, ...)
  sampler     static shapes and sampling of the JAX sampler
  rollout     response budget, padding widths, hooks (REX-RAG clones, ...)
  sft         cold-start supervised fine-tuning (steps=0: none)
  rl, optim, critic_optim, trainer     the RL update and its loop
  eval        evaluation batch size and question cap; benchmark suites (configs/suites.py),
              their data root, the judge model, the published row to compare with
"""

import os
import sys

from ml_collections import ConfigDict, config_dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suites  # noqa: E402  (configs/suites.py: the benchmark suites, as data)


def get_config() -> ConfigDict:
  c = ConfigDict()
  c.recipe = "search_r1"
  c.seed = 0
  c.workdir = "runs/default"
  c.progress = True
  c.hardware = ""               # the paper's accelerators, for `--dry_run` (e.g. "h100x8")

  # preset: a named shape (ragjax.models.presets; random weights unless `checkpoint`);
  # checkpoint: an HF directory (its config.json wins); both empty: the shape below, from
  # scratch (the embedded default's small policies).
  c.model = ConfigDict(dict(
      preset="", checkpoint="", dtype="float32", param_dtype="float32", scan_layers=False,
      remat=False, hidden_size=0, intermediate_size=0, num_layers=0, num_heads=0,
      num_kv_heads=0, head_dim=0, rope_theta=10000.0))
  c.mesh = ConfigDict(dict(data=1, fsdp=-1, tensor=1))

  # stages: {registered data stage: kwargs}, applied in order to the training records before
  # the trainer walks them (UR²'s curriculum: {"ur2_curriculum": {...}}).
  c.data = ConfigDict(dict(source="world", train_files=(), dev_files=(), test_files=(),
                           stages={}))
  c.world = ConfigDict(dict(
      seed=0, train_worlds=1, num_train=1000, num_dev=100, num_test=200, num_people=80,
      num_places=25, num_orgs=20, num_works=40, retry_groups=20, min_passage_words=24,
      name_lexicon=0))
  # extra_tags: a protocol's tags as one token each (the Search-R1 tags always are)
  c.tokenizer = ConfigDict(dict(vocab_size=2048, syllables=False, digit_pairs=False,
                                extra_tags=()))
  # index: a directory from `python -m ragjax.retrieval.build`; url: a Search-R1 /retrieve
  # server; both empty with data.source="world": an index of the world corpus built in workdir.
  # timeout: seconds per request; deadline: seconds a call may spend retrying a down server
  # before the step is retried from its start (trainer.step_retries times).
  c.retriever = ConfigDict(dict(index="", url="", backend="scann", encoder_dir="",
                                cache_size=4096, timeout=30.0, deadline=120.0))

  c.protocol = ConfigDict(dict(name="search_r1", top_k=3, max_turns=4, obs_max_tokens=500))
  c.sampler = ConfigDict(dict(
      max_cache_length=4096, max_new_tokens=500, prompt_buckets=(64, 128, 256, 512, 1024, 2048),
      extend_buckets=(16, 32, 64, 128, 256, 512), temperature=1.0, top_p=1.0))
  # widths: trajectories are padded to one of these (few shapes -> few compiles);
  # hooks: {registered rollout hook: kwargs}; chat: None = the tokenizer's chat template if any.
  # wave_rows: at most this many rows decode at once (0 = the whole step's rows), or as many
  # as a KV cache of kv_budget_gb per device holds: the KV cache and prefill hold one wave
  # (see `--dry_run`).
  c.rollout = ConfigDict(dict(max_response_tokens=0, spare_rows=0, wave_rows=0,
                              kv_budget_gb=0.0, widths=(512, 1024, 2048, 4096), hooks={},
                              chat=None))
  c.rollout.chat = config_dict.placeholder(bool)

  c.sft = ConfigDict(dict(steps=0, batch_size=32, lr=5e-3, warmup_steps=40, min_lr_ratio=0.1,
                          weight_decay=0.01, gather=True, context_weight=0.0, log_every=10))

  c.rl = ConfigDict(dict(
      advantage="grpo", group_size=5, adv_eps=1e-6, clip_low=0.2, clip_high=0.2, dual_clip=None,
      loss_agg="token-mean", kl_coef=0.001, kl_estimator="k3", kl_in_reward=False,
      entropy_coef=0.0, value_clip=0.2, gamma=1.0, lam=1.0, train_on=("policy",),
      use_sampler_logprobs=False, gather=False, temperature=1.0, logprob_chunk=8192,
      ppo_epochs=1, mini_batch_size=0, micro_batch_size=0, rewards={"search_r1_em": 1.0},
      reward_kwargs={}, behaviour="", behaviour_kwargs={}, metrics=()))
  c.rl.dual_clip = config_dict.placeholder(float)
  c.optim = ConfigDict(dict(lr=1e-6, schedule="constant", warmup_steps=0, warmup_ratio=0.0,
                            min_lr_ratio=0.0, total_steps=1000, b1=0.9, b2=0.999, eps=1e-8,
                            weight_decay=0.01, grad_clip=1.0))
  c.critic_optim = None
  c.trainer = ConfigDict(dict(
      num_steps=1000, batch_prompts=512, eval_every=50, eval_prompts=0, save_every=50,
      max_to_keep=2, keep_best_metric="dev/em", keep_best=False, tensorboard=True,
      step_retries=3))
  # data_root: where suite files are looked up ("" = ../shared/data beside the repo);
  # method: the row of configs/paper_results.json this config reproduces (with the model
  # preset as its size); judge: the model behind `acc` (an OpenAI-compatible url + model, or
  # an HF checkpoint run in process; both empty = no judge, acc is reported as not computed).
  c.eval = ConfigDict(dict(
      batch_size=64, max_questions=0, data_root="", method="", model="",
      judge=ConfigDict(dict(url="", model="", checkpoint="", api_key_env="", cache="",
                            max_prompt_tokens=4096)),
      suites=ConfigDict(suites.SUITES)))
  return c
