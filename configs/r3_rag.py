"""R3-RAG (Li et al. 2025): cold-start trajectories, SFT, step-level PPO with judge rewards.

  --config=configs/r3_rag.py:tiny          tiny policy on the synthetic world, CPU smoke run
  --config=configs/r3_rag.py:world         the embedded world at ablation scale
  --config=configs/r3_rag.py:qwen2.5-7b    the paper's Qwen recipe
  --config=configs/r3_rag.py:llama-3.1-8b  the paper's Llama recipe
  --config=configs/r3_rag.py:smollm2       SmolLM2-135M-Instruct on HotpotQA, BM25 over real
        Wikipedia passages, its judge SmolLM2 served by `python -m ragjax.services.chat_server
        --checkpoint GGUF --model-name SmolLM2-135M-Instruct` at judge.url (docs/real_model.md)
  --config=configs/r3_rag.py:smollm2-tiny  the same, one PPO step on 2 questions (CI)

Three stages (`stage`): `data` (teacher trajectories, rejection sampling, best-of-N, into
`<workdir>/cold_start_data`), `sft` (step samples -> `<workdir>/cold_start_policy`, HF
safetensors: R3-RAG-CS), `rl` (PPO with a critic, each step a sample, judge rewards ->
`<workdir>/policy`, then R3-RAG's evaluation); `all` runs them in order, each reusing what an
earlier run left.  Spec: shared/research/seeds_rex_autorefine_r3.md §3, its [D] decisions.

Real sizes need `model.checkpoint` (the instruct model), `data.train_files` (RL questions;
`r3.cold_start_files` for the cold-start questions), `data.dev_files`, `retriever.index` or
`retriever.url`, a teacher (`teacher.url`, e.g. https://api.deepseek.com with
teacher.api_key_env) and a judge (`judge.url`: Qwen2.5-14B-Instruct behind any OpenAI-compatible
server, e.g. `python -m ragjax.services.chat_server`).  Hyperparameters: §3.4 / §3.5 tables
(actor lr 5e-7, critic 9e-6, KL 0.01 in the reward, 64 prompts x 4 samples at temperatures
0.1/0.4/0.7/1.0, mini-batch 64, micro 4, GAE gamma = lambda = 1, clip 0.2, warmup 0.03; SFT lr
7e-6 Qwen / 1e-5 Llama, batch 16 / 8, 3 epochs (LLaMA-Factory's default in the released
config); teacher: 7 attempts, 0.0 then 0.9, top-3, 256 tokens).  RL trains on a seeded sample
of 8,192 of the HotpotQA questions the cold start did not use (`r3.rl_questions`,
`r3.rl_sample`).  Evaluation ACC is judged by `eval.judge`, named Qwen2.5-72B-Instruct as in
the paper (§4.1): give it `eval.judge.url` (or `.checkpoint`); without one ACC is reported as
not computed (`r3.acc_judge="training"` asks the 14B training judge instead, a deviation).

The released code (train/R3RAG_OpenRLHF) is not the run behind the paper's tables (its RL data
script keeps 256 questions, the paper 8,192), so where it and the paper differ the paper is the
default and the code one field away (docs/methods/r3_rag.md):
  --config.rl.reward_kwargs.r3_rag.lambda_form=one_plus_gamma   lambda_T = 1 + gamma, always
        positive (the paper's Eq. 4 / §3.3: lambda_T = gamma, negative on wrong and failed)
  --config.protocol.doc_cut=joined   the step's joined documents cut to 512 characters (the
        paper's App. E: each document)
  --config.r3.rl_sample=first        the questions after the cold start's, in file order
Ablation (Table 2): --config.rl.reward_kwargs.r3_rag.process=False (outcome reward only).
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)

smollm2 = sibling(__file__, "smollm2")  # (configs/smollm2.py: the real model's setup)

# every valid config argument
ARGS = ("tiny", "world", "qwen2.5-7b", "llama-3.1-8b", "smollm2", "smollm2-tiny")
# the judge of the smollm2 variants: SmolLM2 itself (smollm2.MODEL_NAME), served by
#   python -m ragjax.services.chat_server --checkpoint GGUF --model-name SmolLM2-135M-Instruct
JUDGE_URL = "http://127.0.0.1:8001"


def plan(c):
  """Derived quantities beyond ragjax.planning.plan's.  Every step is its own sample, so a step
  trains 1 to max_turns samples per trajectory, in mini-batches of rl.mini_batch_size: the
  generic per-trajectory counts are replaced by ranges.  Then the rewards' readings, the
  judges, the data and SFT, and the evaluation protocol (`--suite r3_rag`)."""
  from ragjax.planning.plan import eval_plan
  out = eval_plan(c, "r3_rag")
  rows = c.trainer.batch_prompts * c.rl.group_size
  turns, mb = int(c.protocol.max_turns), int(c.rl.mini_batch_size or rows)
  lo, hi = -(-rows // mb) * c.rl.ppo_epochs, -(-rows * turns // mb) * c.rl.ppo_epochs
  out.update(
      sequences_per_step=f"{rows}-{rows * turns} step samples ({rows} trajectories x 1-{turns})",
      updates_per_step=f"{lo}-{hi}", updates_total=f"{lo * c.trainer.num_steps}-"
                                                    f"{hi * c.trainer.num_steps}")
  kw = c.rl.reward_kwargs.r3_rag
  out["process_reward"] = bool(kw.get("process", True))
  out["lambda_T"] = [round(g if kw.get("lambda_form", "gamma") == "gamma" else 1 + g, 6)
                     for g in (kw.get("gamma_correct", 0.6), kw.get("gamma_incorrect", -0.2),
                               kw.get("gamma_fail", -0.1))]
  out["answer_reward"] = float(kw.get("answer_reward", 2.0))
  out["format_penalty"] = float(kw.get("format_penalty", -0.9))
  out["step_generations"] = 1 + int(c.protocol.get("format_retries", 0))
  out["doc_chars"] = c.protocol.get("obs_max_chars")
  out["doc_cut"] = c.protocol.get("doc_cut", "joined")
  out["temperatures"] = [float(t) for t in c.sampler.get("temperatures", ())]
  out["gae"] = [float(c.rl.gamma), float(c.rl.lam)]
  out["adam_betas"] = [float(c.optim.b1), float(c.optim.b2)]
  out["relevance_judge"] = c.judge.model
  out["acc_judge"] = (c.eval.judge.model or "(none: ACC not computed)"
                      if c.r3.acc_judge == "eval" else f"{c.judge.model} (the training judge)")
  out["rl_questions"] = int(c.r3.rl_questions)
  out["rl_sample"] = c.r3.rl_sample
  out["teacher"] = c.teacher.model
  out["cold_start_attempts"] = int(c.cold_start.attempts)
  out["sft_lr"], out["sft_batch"] = float(c.sft.lr), int(c.sft.batch_size)
  out["sft_epochs"] = int(c.r3.sft_epochs)
  out["sft_warmup_ratio"] = float(c.r3.get("sft_warmup_ratio", 0.0))
  return out


def get_config(arg: str = "tiny"):
  arg = (arg or "tiny").lower()
  if arg not in ARGS:
    raise ValueError(f"unknown config argument {arg!r}; use one of {list(ARGS)}")
  real = arg.startswith("smollm2")
  small = arg in ("tiny", "world") or real      # (the smollm2 sizes replace the rest below)
  c = common.get_config()
  run_and_model(c, arg, small)
  paper_protocol(c)
  cold_start_stage(c, small)
  sft_stage(c, qwen=arg == "qwen2.5-7b")
  rl_stage(c, small)
  schedules_and_evaluation(c, small)
  if arg == "tiny":
    tiny_sizes(c)
  if arg == "world":
    world_sizes(c)
  if real:
    smollm2_sizes(c, tiny=arg == "smollm2-tiny")
  return c


def run_and_model(c, arg: str, small: bool) -> None:
  """The recipe, its stages and workdir; the paper's model (a tiny one at small sizes)."""
  tiny = arg == "tiny"
  c.recipe = "r3_rag"
  c.stage = "all"                # data | sft | rl | all
  c.workdir = f"runs/r3_rag_{arg}"
  c.hardware = "" if small else "h100x8"       # "NVIDIA H100 GPUs"; the scripts assume 8
  if small:
    c.model.update(dict(preset="tiny" if tiny else "", checkpoint="", dtype="float32",
                        param_dtype="float32", scan_layers=False, remat=False))
  else:
    c.model.update(dict(preset=arg, checkpoint="", dtype="bfloat16", param_dtype="float32",
                        scan_layers=True, remat=True))
  c.mesh.update(dict(data=1, fsdp=-1, tensor=1))


def paper_protocol(c) -> None:
  """The protocol, sampler and rollout widths as the paper's RL runs them."""
  # The protocol as the paper's RL runs it: a fresh single-turn chat per step (the history in
  # the user message; context="stream" keeps it in one assistant stream instead), top-2
  # passages each cut to 512 characters (App. E), passages seen earlier skipped, at most
  # 10 per trajectory, at most 5 steps, "Step j:" checked and a failing step generated again
  # up to twice (the code's try_format_wrong = 3 generations).
  c.protocol = common.protocol(
      "r3_rag", "context", "top_k", "max_turns", "obs_max_chars", "obs_max_tokens", "dedup_docs",
      "max_docs_per_trajectory", step_header=True, doc_cut="each", format_retries=2)
  # 512 new tokens per step, prompts up to 4096 tokens; the per-sample temperature ladder.  Only
  # a question's first prompt is prefilled (a few hundred tokens at most); every later step's
  # prompt keeps the cached prefix it shares with the last one and extends the rest in
  # extend_buckets chunks, so prompts never need a 4096-token prefill bucket.
  c.sampler.update(dict(max_cache_length=4608, max_new_tokens=512,
                        prompt_buckets=(128, 256, 512), extend_buckets=(16, 32, 64, 128, 256, 512),
                        temperature=1.0, top_p=1.0))
  c.sampler.temperatures = (0.1, 0.4, 0.7, 1.0)
  c.rollout.update(dict(widths=(512, 1024, 2048, 3072, 4608), chat=None))


def cold_start_stage(c, small: bool) -> None:
  """Stage 1: the teacher, the cold-start trajectories and the recipe's own paths (`r3`)."""
  # Stage 1: cold-start trajectories (§3.5).  r3.* are the recipe's own paths and choices.
  # The teacher: any chat_service (configs/common.py); the world's scripted one for small sizes.
  c.teacher = common.chat_service(
      "world" if small else "url", model="teacher" if small else "deepseek-chat",
      url="" if small else "https://api.deepseek.com",
      api_key_env="" if small else "DEEPSEEK_API_KEY", max_prompt_tokens=4096, max_new_tokens=256,
      world=common.ConfigDict(dict(wasted_query_rate=0.3, wrong_answer_rate=0.25,
                                   malformed_rate=0.1)))
  c.cold_start = common.ConfigDict(dict(
      attempts=7, first_temperature=0.0, temperature=0.9, max_steps=5, top_k=3, max_tokens=256,
      format_retries=2, select="best_of_n", answer_judge=True, chunk=64, max_questions=0,
      seed=0))
  c.r3 = common.ConfigDict(dict(
      data_dir="",               # "" = <workdir>/cold_start_data
      cold_start_files=(),       # question files for the cold start ("" = the train split)
      disjoint_rl=True,          # RL questions exclude the cold start's (the paper: 8,192 others)
      rl_questions=0 if small else 8192,   # RL questions (the paper: 8,192); 0 = all
      rl_sample="random",        # random: a seeded sample (the paper); first: in file order
      acc_judge="training" if small else "eval",   # ACC by eval.judge, or the training judge
      sft_epochs=3,              # SFT steps = ceil(epochs x samples / sft.batch_size)
      sft_warmup_ratio=0.0 if small else 0.1,   # SFT warmup = ceil(ratio x steps) (0: sft's own)
      sft_doc_chars=0,           # documents in SFT inputs cut to this (0 = as retrieved)
      policy="",                 # "" = <workdir>/cold_start_policy (the SFT stage's output)
      eval_splits=("dev", "test"), eval_top_k=5, eval_max_turns=5, eval_doc_chars=0))


def sft_stage(c, qwen: bool) -> None:
  """Stage 2: SFT of the cold-start policy."""
  # Stage 2: SFT (LLaMA-Factory, full parameters): lr 7e-6 (Qwen) / 1e-5 (Llama), batch 16 / 8.
  c.sft.update(dict(steps=0, batch_size=16 if qwen else 8, lr=7e-6 if qwen else 1e-5,
                    warmup_steps=0, min_lr_ratio=0.0, weight_decay=0.0, gather=True,
                    context_weight=0.0, log_every=10))


def rl_stage(c, small: bool) -> None:
  """Stage 3: PPO with a critic, each step a sample, and the judge rewards."""
  # Stage 3: PPO with a critic, each step a sample; the judge (relevance and Acc_model) is a
  # chat_service: the gold-passage rule judge on the world, else a served model (the paper:
  # Qwen2.5-14B-Instruct; judge.url to set).  Evaluation ACC asks eval.judge when it names a
  # model (the paper: Qwen2.5-72B-Instruct), else this judge.
  c.judge.update(dict(kind="gold" if small else "url", model="judge" if small else
                      "Qwen2.5-14B-Instruct", max_prompt_tokens=4096, max_new_tokens=512))
  c.rl.update(dict(
      advantage="gae", group_size=4, clip_low=0.2, clip_high=0.2, loss_agg="token-mean",
      kl_coef=0.01, kl_estimator="k1", kl_in_reward=True, entropy_coef=0.0, value_clip=0.2,
      gamma=1.0, lam=1.0, train_on=("policy",), use_sampler_logprobs=False, gather=False,
      logprob_chunk=8192, ppo_epochs=1, mini_batch_size=64,
      micro_batch_size=4, reward_kwargs={}))
  c.rl.step_samples = True
  if not small:   # OpenRLHF as R3-RAG runs it (tiny and world keep their flat token mean)
    # PolicyLoss / ValueLoss: masked_mean(dim=-1).mean() (models/loss.py); the replay buffer
    # whitens the step's advantages before the update (ppo_trainer.py, replay_buffer.py)
    c.rl.update(dict(loss_agg="seq-mean-token-mean", adv_whiten="openrlhf",
                     # init_value_head: the critic's head drawn N(0, (1 / (hidden + 1))^2)
                     # (openrlhf/models/model.py:146-154)
                     value_head_init="openrlhf"))
    # startup/retriever_service.py: e5_Flat.index over Tevatron's wikipedia-nq-corpus (DPR)
    common.pin_wiki18_e5(c)
  c.rl.rewards = {"r3_rag": 1.0}
  # lambda_T = gamma (the paper); the relevance judge reads the documents as the policy did
  c.rl.reward_kwargs = {"r3_rag": dict(judge="judge", process=True, answer_judge=True,
                                       lambda_form="gamma",
                                       doc_cut=c.protocol.get_ref("doc_cut"),
                                       doc_chars=c.protocol.get_ref("obs_max_chars"))}
  c.rl.metrics = ("r3_rag",)


def schedules_and_evaluation(c, small: bool) -> None:
  """The actor's and critic's optimisers, the training loop and the evaluation."""
  # OpenRLHF's scheduler (train/R3RAG_OpenRLHF/openrlhf/cli/train_ppo.py) steps once per
  # optimizer update and spans num_episodes 4 x (8,192 x 4 // 64) = 2,048 of them, warmup
  # ceil(0.03 x 2,048) = 62; Adam betas (0.9, 0.95), no weight decay (its defaults).  The paper
  # states lr 5e-7 / 9e-6 only; after the warmup the rate stays there (the code's
  # cosine_with_min_lr keeps cycling past its 2,048 steps: docs/methods/r3_rag.md).
  sched = dict(schedule="constant", warmup_steps=0 if small else 62, warmup_ratio=0.03,
               min_lr_ratio=0.0, total_steps=2048, b1=0.9, b2=0.999 if small else 0.95,
               eps=1e-8, weight_decay=0.0, grad_clip=1.0, clock="update")
  c.optim.update(dict(lr=5e-7, **sched))
  c.critic_optim = common.ConfigDict(dict(lr=9e-6, **sched))
  # 8,192 RL questions x 4 episodes / 64 prompts per step = 512 steps.
  c.trainer.update(dict(num_steps=512, batch_prompts=64, eval_every=64, eval_prompts=500,
                        save_every=16, max_to_keep=2, keep_best_metric="dev/em",
                        keep_best=False))
  c.eval.update(dict(batch_size=64, max_questions=0))
  c.eval.judge.model = "" if small else "Qwen2.5-72B-Instruct"   # the paper's ACC judge
  c.eval.method = "R3-RAG (E5)"   # its row in configs/paper_results.json (--suite r3_rag)
  c.data.source = "world" if small else "files"


def tiny_sizes(c) -> None:
  """The synthetic world, BM25, a tiny policy, short steps; every stage in seconds."""
  c.world.update(dict(seed=0, train_worlds=1, num_train=48, num_dev=8, num_test=8,
                      num_people=30, num_places=10, num_orgs=8, num_works=12,
                      retry_groups=6))
  c.tokenizer.vocab_size = 1024
  c.retriever.backend = "bm25"
  c.protocol.update(dict(max_turns=3, obs_max_chars=256))
  # one shape per program (one width, the whole cache attended): few compiles
  c.sampler.update(dict(max_cache_length=640, max_new_tokens=96, prompt_buckets=(128,),
                        extend_buckets=(64, 256)))
  c.sampler.attend_buckets = ()
  c.rollout.update(dict(widths=(640,), chat=False))
  c.teacher.world.update(dict(wrong_answer_rate=0.5, malformed_rate=0.2))
  c.cold_start.update(dict(attempts=3, max_steps=4, top_k=2, format_retries=1, chunk=8,
                           max_questions=24))
  c.r3.update(dict(sft_epochs=0, eval_top_k=3, eval_max_turns=3, eval_doc_chars=0))
  # enough SFT for the tiny policy to write R3-RAG steps (so RL sees searches and answers)
  c.sft.update(dict(steps=60, batch_size=8, lr=1e-2, warmup_steps=5, log_every=10))
  c.rl.update(dict(group_size=4, mini_batch_size=8, micro_batch_size=4))
  c.optim.update(dict(lr=1e-3, total_steps=20))
  c.critic_optim.update(dict(lr=1e-3, total_steps=20))
  c.trainer.update(dict(num_steps=2, batch_prompts=2, eval_every=2, eval_prompts=4,
                        save_every=1, max_to_keep=3, tensorboard=False))
  c.r3.eval_splits = ("test",)
  c.eval.update(dict(batch_size=4, max_questions=4))


def world_sizes(c) -> None:
  """The embedded world for ablations: configs/world.py's world, and the 96-wide policy that
  config had until 2026-11-26."""
  c.world.update(dict(seed=0, train_worlds=4, num_train=800, num_dev=64, num_test=128,
                      num_people=40, num_places=12, num_orgs=10, num_works=20,
                      retry_groups=8, min_passage_words=12, name_lexicon=300))
  c.tokenizer.update(dict(vocab_size=2048, syllables=False, digit_pairs=True))
  c.retriever.update(dict(backend="bm25"))
  c.model.update(dict(hidden_size=96, intermediate_size=256, num_layers=3, num_heads=4,
                      num_kv_heads=2, head_dim=24, rope_theta=10000.0))
  c.protocol.update(dict(max_turns=4, obs_max_chars=320))
  c.sampler.update(dict(max_cache_length=1024, max_new_tokens=80,
                        prompt_buckets=(128, 256, 512, 768), extend_buckets=(16, 64, 256)))
  c.rollout.update(dict(widths=(256, 384, 512, 768, 1024), chat=False))
  c.cold_start.update(dict(attempts=4, max_steps=5, top_k=2, chunk=100, max_questions=600))
  c.r3.update(dict(sft_epochs=10, eval_top_k=3, eval_max_turns=4, eval_doc_chars=320))
  c.sft.update(dict(steps=0, batch_size=32, lr=3e-3, warmup_steps=20, min_lr_ratio=0.1,
                    context_weight=0.5, log_every=20))
  c.rl.update(dict(group_size=4, mini_batch_size=32, micro_batch_size=0))
  c.optim.update(dict(lr=1e-4, total_steps=1000))
  c.critic_optim.update(dict(lr=1e-3, total_steps=1000))
  c.trainer.update(dict(num_steps=20, batch_prompts=8, eval_every=10, eval_prompts=64,
                        save_every=5, max_to_keep=1, keep_best=False))
  c.eval.update(dict(batch_size=64, max_questions=0))


def smollm2_sizes(c, tiny: bool) -> None:
  """SmolLM2-135M-Instruct on HotpotQA over real Wikipedia passages: configs/smollm2.py's model
  (LoRA), question split, BM25 and sampler sizes, with R3-RAG's mechanism kept (step format,
  a sample per step, PPO with a critic, the step rewards with their relevance and answer
  judges, the evaluation layout) and three stand-ins (docs/methods/r3_rag.md): the cold start's
  teacher scripts the steps from the gold answer (`teacher.kind="script"`: the question as
  the query, then the answer read from the passages, as configs/smollm2.py's cold start), the
  judge is SmolLM2 itself served at `judge.url` by `python -m ragjax.services.chat_server`,
  and the actor trains LoRA adapters (the critic is the whole model)."""
  c.workdir = "runs/r3_rag_smollm2" + ("_tiny" if tiny else "")
  smollm2.model_and_data(c, tiny)
  smollm2.sampler_sizes(c, tiny)
  c.sampler.update(dict(extend_buckets=(16, 32, 64, 128, 256)))
  # the paper's per-sample temperature ladder for its groups of 4 (tiny: groups of 2 at 1.0)
  c.sampler.temperatures = () if tiny else (0.1, 0.4, 0.7, 1.0)
  c.rollout.chat = None           # SmolLM2's ChatML template
  # steps as short as the cache allows: 2 passages of 384 characters, 3 steps (tiny: 1, 2)
  c.protocol.update(dict(top_k=1 if tiny else 2, max_turns=2 if tiny else 3,
                         obs_max_chars=256 if tiny else 384, format_retries=0 if tiny else 1))
  c.teacher = common.chat_service("script", model="script",
                                  script=dict(require_retrieved=not tiny))
  c.cold_start.update(dict(attempts=1, first_temperature=0.0, max_steps=c.protocol.max_turns,
                           top_k=c.protocol.top_k, max_tokens=64, format_retries=0,
                           select="first", answer_judge=True, chunk=2 if tiny else 64,
                           max_questions=2 if tiny else 800))
  c.judge = common.chat_service("url", url=JUDGE_URL, model=smollm2.MODEL_NAME,
                                max_prompt_tokens=2048, max_new_tokens=16 if tiny else 64)
  c.r3.update(dict(rl_questions=2 if tiny else 0, acc_judge="training", sft_epochs=0,
                   sft_warmup_ratio=0.0, eval_top_k=c.protocol.top_k,
                   eval_max_turns=c.protocol.max_turns, eval_doc_chars=c.protocol.obs_max_chars,
                   eval_splits=("test",)))
  # the cold start as configs/smollm2.py's (LoRA on every layer, merged)
  c.sft.update(dict(steps=1 if tiny else 60, batch_size=2 if tiny else 4, lr=3e-4,
                    warmup_steps=0 if tiny else 5, min_lr_ratio=0.1, log_every=1 if tiny else 5,
                    save_every=0 if tiny else 20))
  # OpenRLHF's losses and whitening as the paper's runs (the critic's head drawn as its init)
  c.rl.update(dict(group_size=2 if tiny else 4, mini_batch_size=0 if tiny else 16,
                   micro_batch_size=0 if tiny else 4, loss_agg="seq-mean-token-mean",
                   adv_whiten="openrlhf", value_head_init="openrlhf"))
  # the actor's LoRA adapters at configs/smollm2.py's rate; the critic at the paper's 9e-6
  c.optim.update(dict(lr=2e-4, warmup_steps=0, b2=0.95, total_steps=100))
  c.critic_optim.update(dict(warmup_steps=0, b2=0.95, total_steps=100))
  # 48 steps of 8 questions x 4: the 1,536 rollouts of configs/smollm2.py's 24 x 8 x 8 (the
  # paper's groups of 4, so twice the steps for the same budget)
  c.trainer.update(dict(num_steps=1 if tiny else 48, batch_prompts=1 if tiny else 8,
                        eval_every=0, eval_prompts=2 if tiny else 100,
                        save_every=1 if tiny else 2, max_to_keep=2, keep_best=False,
                        tensorboard=False))
  c.eval.update(dict(batch_size=2 if tiny else 50, max_questions=2 if tiny else 0))
