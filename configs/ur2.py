"""UR² (Li et al. 2025, "UR²: Unify RAG and Reasoning through Reinforcement Learning"; spec
shared/research/seeds_ur2_rezero.md Part A): one policy for math, multiple choice and
open-domain QA that decides per question whether to retrieve.

  --config=configs/ur2.py:tiny                  synthetic world, random tiny policy: smoke run
  --config=configs/ur2.py:world                 synthetic world, cold-started policy (benchmark)
  --config=configs/ur2.py:qwen2.5-7b-math-qa    the paper's Math&QA model (Qwen2.5-7B-Instruct)
  --config=configs/ur2.py:qwen2.5-3b-math-qa
  --config=configs/ur2.py:llama-3.1-8b-math-qa
  --config=configs/ur2.py:qwen2.5-7b-mcq        MedQA + MMLU-Pro-style multiple choice
  --config=configs/ur2.py:<size>-weak           the "weaker Stage 1" ablation (Table 9)
  --config=configs/ur2.py:smollm2               SmolLM2-135M-Instruct on HotpotQA (BM25 over real
        Wikipedia passages) mixed with GSM8K math, SmolLM2 itself as the summariser
  --config=configs/ur2.py:smollm2-tiny          the same, one Stage-2 step, 2 questions a task (CI)

What runs (`ragjax.recipes.ur2`): data with a `task` per question -> difficulty scores (N
rollouts of a fixed model: `python -m ragjax.eval.difficulty`, files in `ur2.difficulty.files`,
or in the recipe with `ur2.difficulty.rollouts`) -> Stage 1 (retrieval activation on very_hard
math, rewards format + retrieval - fallback, 10 steps; 15 for 3B) -> Stage 2 from Stage 1's
weights (answer + format - fallback) on the curriculum (`data.stages.ur2_curriculum`: QA
7:2:1 hard:medium:easy, math 1:1:1, LLaMA easy for hard math; retrieval prompt for all QA,
hard math, 5/7 hard MCQ) with REINFORCE++-baseline.

Knowledge access (`ur2.knowledge`): "summary" (the paper: top-10 passages summarised by an LLM
with the strong training prompt and its fallback sentence) through `retriever.url` of a served
`python -m ragjax.services.proxy` or an in-process summariser (`ur2.knowledge.summariser`: an
OpenAI-compatible url or an HF checkpoint; math queries go to `ur2.knowledge.math_summariser`);
"raw" passages (the ablation: set protocol.top_k to 3 or 5 as the paper's no-summary rows).
Corpus routing by task: `ur2.knowledge.routes = {"qa": ABSTRACTS_INDEX_OR_URL}` beside
`retriever.index` / `url` (the full corpus) for the rest.

Model services the paper used, named at real sizes (the run refuses to start until each has a
url or checkpoint, or is switched off by its field): the training summariser
gpt-4.1-mini-2025-04-14 (`ur2.knowledge.summariser`; off: `ur2.knowledge.mode=raw`, Table 4's
"w/o LLM summary"), the math summariser Qwen3-32B (`ur2.knowledge.math_summariser`; model=''
lets the summariser serve math too) and the math judge gpt-4.1-mini-2025-04-14 (`judge`; off:
`judge.kind=''`, the rule check alone).

Real sizes name a preset and need `model.checkpoint` (the Instruct model), the question files
(`data.train_files` / `dev_files` entries "TASK[/SOURCE]:[FORMAT:]PATH", e.g.
"math:/data/simplerl_zoo.jsonl", "qa:verl:/data/r1_searcher.parquet",
"mcq/medicine:/data/medqa.jsonl"; the format defaults to the task's reader: qa {question,
answer}, math, mcq), their difficulty score files (`ur2.difficulty.files`), the retriever and
the services above.  The multiple-choice run draws its sources with their own counts
(3,000 MedQA as source "medicine" + 2,000 each of "philosophy", "history", "economics").
Hyperparameters (§A4.3): G 16, 64 prompts per step (3B: 128), 256 samples per optimiser step
(3B: 512), lr 2e-6 cosine to 0.1 x lr without warmup, Adam (0.9, 0.95), no weight decay, clip
1.0; no KL, per-sequence token mean; temperature 1.0, top_p 0.9; at most 4 retrievals;
per-turn budgets by task (QA 512, multiple choice 1,536, math 3,072: `protocol.turn_tokens`).
Where the paper's text and the authors' code differ, the default is the code that trained the
paper's models (UR2_RL/scripts/qwen_reinforce_plus_train.sh and its log, the reward servers
UR2_RL/train/reward_server_*.py), the text one field away (docs/methods/ur2.md):
  --config.rl.advantage=reinforce_pp_group_norm   group std before the batch whitening (Eq. 3)
  --config.rl.clip_ratio=False                    no PPO clip (App. C.1; the code clips at 0.2)
  --config.rl.reward_kwargs.ur2_answer.binary=True   +2 correct / 0 (Eq. 5; the code: 2 x F1
                                                      for QA, partial math credit 1)
`python -m ragjax.train --config=configs/ur2.py:<size> --dry_run` checks the memory plan on the
paper's 8 x A100 80GB (`hardware`).
"""

import os

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)
smollm2 = sibling(__file__, "smollm2")  # (configs/smollm2.py: the real model's setup)

VARIANTS = ("qwen2.5-7b-math-qa", "qwen2.5-3b-math-qa", "llama-3.1-8b-math-qa", "qwen2.5-7b-mcq")
# (the MCQ model's Stage 1 is already the weak one)
ARGS = (("tiny", "world") + VARIANTS + tuple(v + "-weak" for v in VARIANTS if "mcq" not in v)
        + ("smollm2", "smollm2-tiny"))
# the smollm2 variants' math questions, mixed with configs/smollm2.py's HotpotQA split (the one
# math file in ../shared/data: GSM8K's test set, trained on here, never evaluated on)
GSM8K = os.path.join(smollm2.DATA, "gsm8k", "gsm8k_test.jsonl")

# Stage 1 (§A3.3): format + retrieval - fallback; check 9 (no search) is a violation while
# step < 15 in the code, i.e. the whole 10/15-step stage.
STAGE1_REWARDS = {"ur2_format": 1.0, "ur2_retrieval": 1.0, "ur2_fallback": 1.0}
# Stage 2 (§A3.4): answer + format - fallback.
STAGE2_REWARDS = {"ur2_answer": 1.0, "ur2_format": 1.0, "ur2_fallback": 1.0}
# The "weaker Stage 1" (MCQ runs; Table 9's ablation): +0.5 / +1.0 retrieval in Stage 2's
# first 10 steps, no separate stage.
WEAK_RETRIEVAL = {"one": 0.5, "many": 1.0, "steps": 10}
QA_RATIOS = {"hard": 7, "medium": 2, "easy": 1}
MATH_RATIOS = {"hard": 1, "medium": 1, "easy": 1}
# Per-task turn budgets (the code's vLLM max_tokens; paper App. C.1).
TURN_TOKENS = {"qa": 512, "mcq": 1536, "math": 3072}
# The training scripts' --num_episodes: the span of OpenRLHF's LR schedule, not the run's length.
EPISODES = 10000
# The multiple-choice training set (§4.1): 3K MedQA + 2K of each synthetic MMLU-Pro domain,
# by the code's source names.
MCQ_SOURCES = {"mcq:medicine": 3000, "mcq:philosophy": 2000, "mcq:history": 2000,
               "mcq:economics": 2000}
# The models the paper used (App. C.2, C.4, §A4.5 of the spec).
SUMMARISER = "gpt-4.1-mini-2025-04-14"
MATH_SUMMARISER = "Qwen3-32B"
MATH_JUDGE = "gpt-4.1-mini-2025-04-14"


def plan(c):
  """Derived quantities beyond ragjax.planning.plan's: per-task turn budgets, the two stages,
  the advantage / clip / answer-reward readings, the services, the data mix, the LR span, the
  KV cache a trajectory lives in, and the evaluation protocol (`--suite ur2`)."""
  from ragjax.planning.plan import eval_plan
  out = eval_plan(c, "ur2")
  cap = int(c.sampler.max_new_tokens)
  budgets = dict(c.protocol.get("turn_tokens") or {})
  for task in ("qa", "mcq", "math"):
    out[f"turn_tokens_{task}"] = min(int(budgets.get(task, cap)), cap)
  s1 = c.ur2.stage1
  full = s1.mode == "full"
  out["stage1_steps"] = s1.num_steps if full else 0
  if full:
    r = s1.reward_kwargs.ur2_retrieval
    out["stage1_retrieval_reward"] = [float(r.one), float(r.many)]
  bonus = c.rl.reward_kwargs.get("ur2_retrieval") if "ur2_retrieval" in c.rl.rewards else None
  out["stage2_retrieval_bonus"] = ([float(bonus.one), float(bonus.many), int(bonus.steps)]
                                   if bonus is not None else "none")
  out["advantage"] = c.rl.advantage
  out["ratio_clip"] = bool(c.rl.clip_ratio)
  out["answer_reward"] = ("binary" if c.rl.reward_kwargs.ur2_answer.get("binary", False)
                          else "2xF1 (QA), partial math credit")
  k = c.ur2.knowledge
  out["summariser"] = k.summariser.model if k.mode == "summary" else "none (raw passages)"
  out["math_summariser"] = (k.math_summariser.model or k.summariser.model
                            if k.mode == "summary" else "none (raw passages)")
  out["math_judge"] = c.judge.model if c.judge.kind else "none (rule check)"
  counts = dict(c.data.stages.get("ur2_curriculum", {}).get("counts", {}) or {})
  out["train_questions"] = sum(int(v) for v in counts.values())
  mcq = {key.partition(":")[2]: int(v) for key, v in counts.items() if ":" in key}
  if mcq:
    out["mcq_sources"] = mcq
  out["lr_schedule_span"] = int(c.optim.total_steps)
  out["cache_tokens"] = int(c.sampler.max_cache_length)
  return out


def summariser_section(model: str):
  """An in-process summariser, a `chat_service` of kind "auto": an OpenAI-compatible `url`
  serving `model`, or an HF `checkpoint`; `model` alone names the paper's and the run asks for
  the rest.  max_new_tokens 0: each request asks the template's budget (§A4.5)."""
  return common.chat_service("auto", model=model, max_retries=8, max_prompt_tokens=8192,
                             max_new_tokens=0)


def curriculum(counts, ratios, substitute=None, shortage="error"):
  return {"ur2_curriculum": dict(mode="curriculum", counts=counts, ratios=ratios,
                                 substitute=substitute or {}, keep=("easy", "medium", "hard"),
                                 shortage=shortage)}


def get_config(arg: str = "tiny"):
  arg = (arg or "tiny").lower()
  if arg not in ARGS:
    raise ValueError(f"unknown config argument {arg!r}; use one of {list(ARGS)}")
  weak = arg.endswith("-weak")
  variant = arg[:-len("-weak")] if weak else arg
  real = variant.startswith("smollm2")       # (its sizes replace the paper's below)
  small = variant in ("tiny", "world")
  mcq = variant.endswith("-mcq")
  family = "llama" if variant.startswith("llama") else "qwen"
  size = {"qwen2.5-7b-math-qa": "qwen2.5-7b", "qwen2.5-3b-math-qa": "qwen2.5-3b",
          "llama-3.1-8b-math-qa": "llama-3.1-8b", "qwen2.5-7b-mcq": "qwen2.5-7b"}.get(variant, "")
  three_b = size == "qwen2.5-3b"

  c = common.get_config()
  c.recipe = "ur2"
  c.workdir = f"runs/ur2_{arg}"
  c.hardware = "" if small else "a100x8"          # UR² trained on 8 A100s
  c.model.update(dict(preset=size, checkpoint="", dtype="float32" if small else "bfloat16",
                      param_dtype="float32", scan_layers=not small, remat=not small))

  # The protocol's task is the default; every record carries its own.
  c.protocol = common.protocol("ur2", "top_k", "max_turns", "final_turn", "prompts",
                               task="mcq" if mcq else "qa", turn_tokens=dict(TURN_TOKENS))
  # one value: the rewards' default task follows --config.protocol.task
  task = c.protocol.get_ref("task")
  # A row's whole trajectory lives in the KV cache: 8192 slots (the code gives vLLM a
  # 29000-token budget; longer trajectories stop at the cache and score no answer), rolled out
  # in waves sized by a 24 GB per-device KV budget, so every variant passes `--dry_run` on 8
  # A100s.  Prompts: UR²'s prompt_max_len 2048 (MCQ: long MMLU-Pro law questions with ten
  # options), 1024 for Math&QA.
  c.sampler.update(dict(max_cache_length=8192, max_new_tokens=1536 if mcq else 3072,
                        temperature=1.0, top_p=0.9,
                        prompt_buckets=(256, 512, 1024, 2048) if mcq else (256, 512, 1024),
                        extend_buckets=(16, 32, 64, 128, 256, 512)))
  c.rollout.update(dict(max_response_tokens=0, kv_budget_gb=24.0,
                        widths=(1024, 2048, 4096, 6144, 8192)))

  # REINFORCE++-baseline as OpenRLHF runs it (§A4.2): group mean, masked batch whitening,
  # PPO clip 0.2, no KL, per-sequence token mean, one pass in mini-batches.
  prompts = 128 if three_b else 64
  c.rl.update(dict(
      advantage="reinforce_pp_baseline", group_size=16, clip_low=0.2, clip_high=0.2,
      loss_agg="seq-mean-token-mean", kl_coef=0.0, entropy_coef=0.0, use_sampler_logprobs=False,
      ppo_epochs=1, train_on=("policy",),
      mini_batch_size=512 if three_b else 256, micro_batch_size=1, metrics=("ur2_tasks",)))
  c.rl.rewards = dict(STAGE2_REWARDS)
  fmt = {"mode": "stage2", "family": family, "task": task}
  if variant == "qwen2.5-3b-mcq":          # (kept for the code's 3B MCQ server, not an ARG)
    fmt["missing_retrieval_steps"] = 15
  # binary=False: the reward servers' 2 x F1 (QA) and partial math credit (the table's runs)
  c.rl.reward_kwargs = {"ur2_format": fmt, "ur2_answer": {"task": task, "binary": False}}
  # lr 2e-6, cosine_with_min_lr (min 0.1 x lr), no warmup; Adam (0.9, 0.95), no decay.
  # Epochs: the paper trains up to 2 and reports the best test checkpoint within 1.5; here
  # 1.5 epochs with keep-best on dev (§A4.3 [D]): 6000 (Math&QA) / 9000 (MCQ) prompts.
  # OpenRLHF's cosine spans the scripts' num_episodes (10,000) x the updates of one pass
  # (UR2_RL/OpenRLHF-RAG/openrlhf/trainer/ray/ppo_actor.py: max_steps), stepped per update:
  # over the 1.5 epochs trained the rate stays at 2e-6 (within 1e-6 of it).
  prompts_total = 9000 if mcq else 6000
  steps = (prompts_total * 3 // 2) // prompts
  c.optim.update(dict(lr=2e-6, schedule="cosine", warmup_steps=0, warmup_ratio=0.0,
                      min_lr_ratio=0.1, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0,
                      grad_clip=1.0, clock="update",
                      total_steps=EPISODES * (prompts_total * 16 // c.rl.mini_batch_size)))
  c.trainer.update(dict(num_steps=steps, batch_prompts=prompts, eval_every=5 if three_b else 10,
                        eval_prompts=500, save_every=5 if three_b else 10, max_to_keep=2,
                        keep_best_metric="dev/em", keep_best=True))

  c.eval.method = "UR2"       # its rows in configs/paper_results.json (--suite ur2)
  c.data.source = "files"
  # The math judge (§A3.1): rule check, then the judge prompt (Correct 2 / Partially 1 / 0).
  # The multiple-choice run has no math.
  c.judge = common.chat_service("" if mcq else "url", model="" if mcq else MATH_JUDGE,
                                max_prompt_tokens=4096, max_new_tokens=512)
  if mcq:
    c.data.stages = curriculum(dict(MCQ_SOURCES), {"mcq": QA_RATIOS})
  else:
    c.data.stages = curriculum(
        {"qa": 3000, "math": 3000}, {"qa": QA_RATIOS, "math": MATH_RATIOS},
        substitute={"math": {"hard": "easy"}} if family == "llama" else None)

  c.ur2 = common.ConfigDict(dict(
      max_per_task=0,            # training questions kept per task before difficulty (0 = all)
      # the synthetic world's extra tasks (data.source="world"): shares of each split's size
      world_tasks=common.ConfigDict(dict(mcq_fraction=0.5, math_fraction=0.5, options=4)),
      # difficulty: score files of `python -m ragjax.eval.difficulty` (jsonl, by record id),
      # or `rollouts` > 0: N CoT rollouts per training question of the start policy, here
      # (retrieval_tasks: scored with the retrieval prompt instead of CoT)
      difficulty=common.ConfigDict(dict(files=(), rollouts=0, chunk=16, retrieval_tasks=(),
                                        splits=("train",))),   # splits scored (train needed)
      # Stage 1: "full" (a separate run of num_steps, the Stage-2 run starts from its
      # weights) or "off" (MCQ and the weak ablation: no stage)
      stage1=common.ConfigDict(dict(
          mode="off" if (mcq or weak) else "full", num_steps=15 if three_b else 10,
          rewards=dict(STAGE1_REWARDS),
          reward_kwargs={"ur2_format": {"mode": "stage1", "family": family, "task": task,
                                        "missing_retrieval_steps": 15},
                         "ur2_retrieval": ({"one": 5.0, "many": 7.0} if three_b
                                           else {"one": 3.0, "many": 3.0} if family == "llama"
                                           else {"one": 3.0, "many": 4.0})},
          # the questions the curriculum drops: very_hard math, all with retrieval
          data=dict(tasks=("math",), keep=("very_hard",), ratios={}, mode="uniform",
                    counts={}, shortage="error"))),
      knowledge=common.ConfigDict(dict(
          mode="summary", prompt="strong", routes=common.ConfigDict(dict(qa="")),
          on_error="raise",
          # (small sizes: "default", the name sent to a server of one unnamed model)
          summariser=summariser_section("default" if small else SUMMARISER),
          math_summariser=summariser_section("" if small or mcq else MATH_SUMMARISER)))))
  if weak or mcq:   # the weaker Stage 1: a small retrieval bonus in Stage 2's first 10 steps
    c.rl.rewards["ur2_retrieval"] = 1.0
    c.rl.reward_kwargs["ur2_retrieval"] = dict(WEAK_RETRIEVAL)

  # BGE-large-en-v1.5 (§4.1) over KILT 100-word segments (29M, rounded in the text: no count
  # pinned); the code's FAISS HNSW32 index is approximate (retrieval_utils/)
  if not small and not real:
    # the two corpora the code's HNSW servers load (retrieval_utils/enwiki_full_hnsw.sh:1,
    # enwiki_abstract_hnsw.sh:1)
    c.retriever.pin.update(dict(encoder="bge-large-en-v1.5", index="approximate",
                                corpus="wiki_kilt_100_really.tsv, enwiki_2017_abstract.tsv"))
  if small:
    _small(c, variant)
  if real:
    smollm2_sizes(c, tiny=variant == "smollm2-tiny")
  return c


def smollm2_sizes(c, tiny: bool) -> None:
  """SmolLM2-135M-Instruct on configs/smollm2.py's HotpotQA split (its model, LoRA, BM25 and
  sampler sizes) mixed with GSM8K math, with UR²'s mechanism kept: difficulty from the start
  policy's CoT rollouts, the curriculum (QA 7:2:1, math 1:1:1) and its retrieval prompts, task
  mixing, Stage 1 then Stage 2's rewards, REINFORCE++-baseline, and the summariser, SmolLM2
  itself in process (docs/methods/ur2.md says what that and the rest change)."""
  c.workdir = "runs/ur2_smollm2" + ("_tiny" if tiny else "")
  c.hardware = ""
  smollm2.model_and_data(c, tiny)
  smollm2.sampler_sizes(c, tiny)
  c.sampler.update(dict(top_p=0.9, extend_buckets=(16, 32, 64, 128, 256)))
  c.rollout.update(dict(max_response_tokens=0, kv_budget_gb=0.0, chat=None))
  # the summaries stand in for the passages: 5 of them summarised (the paper: 10), 2 searches
  c.protocol.update(dict(top_k=2 if tiny else 5, max_turns=1 if tiny else 2))
  c.protocol.turn_tokens = None      # one budget: the sampler's
  c.data.train_files = (f"math:{GSM8K}",)
  c.ur2.max_per_task = 2 if tiny else 300      # training questions a task, before difficulty
  c.judge = common.chat_service("", max_prompt_tokens=1024, max_new_tokens=32)  # rule check
  k = c.ur2.knowledge
  k.summariser = common.chat_service("checkpoint", checkpoint=c.model.checkpoint,
                                     model=smollm2.MODEL_NAME, max_batch=8,
                                     max_prompt_tokens=2048, max_new_tokens=32 if tiny else 128)
  k.math_summariser.model = ""       # the summariser serves math too
  # difficulty: N CoT rollouts of the cold-started policy; a 135M model solves few questions,
  # so "hard" starts at 0 (the paper: 0.2), keeping the questions no rollout solved
  c.ur2.difficulty.update(dict(rollouts=1 if tiny else 4, chunk=8 if tiny else 64,
                               retrieval_tasks=()))
  levels = (("easy", 0.8), ("medium", 0.5), ("hard", 0.0))
  c.data.stages = {"ur2_curriculum": dict(
      mode="curriculum", counts={}, ratios={"qa": QA_RATIOS, "math": MATH_RATIOS},
      substitute={}, keep=("easy", "medium", "hard"), levels=levels, shortage="take_all")}
  # Stage 1 on the hard math (tiny: off, one step less to compile)
  c.ur2.stage1.update(dict(mode="off" if tiny else "full", num_steps=5))
  c.ur2.stage1.data = dict(tasks=("math",), keep=("hard",), ratios={}, mode="uniform",
                           counts={}, levels=levels, shortage="take_all")
  # cold start: configs/smollm2.py's, on UR²-grammar traces scripted from the gold answers
  c.sft.update(dict(steps=1 if tiny else 60, batch_size=2 if tiny else 4, lr=3e-4,
                    warmup_steps=0 if tiny else 5, min_lr_ratio=0.1, weight_decay=0.0,
                    gather=True, context_weight=0.0, log_every=1 if tiny else 5,
                    save_every=0 if tiny else 20))
  c.traces = common.ConfigDict(dict(questions=4 if tiny else 400, chunk=4 if tiny else 64))
  c.rl.update(dict(group_size=2 if tiny else 8, mini_batch_size=0, micro_batch_size=0 if tiny
                   else 4, use_sampler_logprobs=True, gather=True, logprob_chunk=4096))
  c.optim.update(dict(lr=2e-4, schedule="constant", warmup_steps=0, total_steps=100))
  # 24 Stage-2 steps of 8 questions x 8: configs/smollm2.py's 1,536 rollouts
  c.trainer.update(dict(num_steps=1 if tiny else 24, batch_prompts=2 if tiny else 8,
                        eval_every=0, eval_prompts=2 if tiny else 100,
                        save_every=1 if tiny else 2, max_to_keep=2, keep_best=False,
                        tensorboard=False))
  c.eval.batch_size = 2 if tiny else 50


def _small(c, variant: str):
  """The synthetic world (no weights or corpus to download), BM25, a from-scratch policy."""
  tiny = variant == "tiny"
  c.data.source = "world"
  c.world.update(dict(seed=0, train_worlds=1 if tiny else 4, num_train=24 if tiny else 600,
                      num_dev=8 if tiny else 100, num_test=8 if tiny else 200,
                      num_people=30 if tiny else 40, num_places=10 if tiny else 12,
                      num_orgs=8 if tiny else 10, num_works=12 if tiny else 20,
                      retry_groups=6 if tiny else 8, min_passage_words=12,
                      name_lexicon=200 if tiny else 300))
  # UR²'s four tags as one token each, as the world tokenizer does for Search-R1's.
  c.tokenizer.update(dict(vocab_size=1024 if tiny else 2048, syllables=False, digit_pairs=True,
                          extra_tags=("<|begin_of_query|>", "<|end_of_query|>",
                                      "<|begin_of_documents|>", "<|end_of_documents|>")))
  c.retriever.backend = "bm25" if tiny else "scann"
  c.model.update(dict(hidden_size=32 if tiny else 96, intermediate_size=64 if tiny else 256,
                      num_layers=1 if tiny else 3, num_heads=2 if tiny else 4,
                      num_kv_heads=1 if tiny else 2, head_dim=16 if tiny else 24,
                      rope_theta=10000.0))
  # The compact prompts (a from-scratch policy cannot read the App. D.2 English, ~1000 tokens
  # each with the world tokenizer): the same retrieval / CoT choice per task in a line.
  c.protocol.update(dict(task="qa", top_k=2, max_turns=3, prompts="compact"))
  c.protocol.turn_tokens = None      # one budget: the sampler's
  c.judge = common.chat_service("", max_prompt_tokens=1024, max_new_tokens=32)
  # tiny: one shape per compiled program (one prompt bucket, whole-cache attention, one
  # trajectory width), since compiling dominates a smoke run.
  c.sampler.update(dict(max_cache_length=512 if tiny else 768,
                        max_new_tokens=48, temperature=1.0, top_p=1.0,
                        prompt_buckets=(128,) if tiny else (64, 128),
                        extend_buckets=(32, 128) if tiny else (16, 32, 64, 128, 192)))
  c.sampler.attend_buckets = () if tiny else None
  c.rollout.update(dict(max_response_tokens=320 if tiny else 448, chat=False, kv_budget_gb=0.0,
                        widths=(512,) if tiny else (256, 384, 512, 768)))
  c.rl.update(dict(group_size=2 if tiny else 4, mini_batch_size=0, micro_batch_size=0,
                   use_sampler_logprobs=True, gather=True, logprob_chunk=4096))
  c.optim.update(dict(lr=1e-3 if tiny else 3e-4, schedule="constant", min_lr_ratio=0.0,
                      total_steps=4 if tiny else 30))
  c.trainer.update(dict(num_steps=2 if tiny else 30, batch_prompts=4 if tiny else 16,
                        eval_every=2 if tiny else 10, eval_prompts=8 if tiny else 100,
                        save_every=1 if tiny else 10, max_to_keep=2, keep_best=not tiny))
  c.eval.batch_size = 8 if tiny else 100
  # Curriculum over the world's tasks: difficulty from N rollouts of the start policy.  A
  # random tiny policy scores 0 everywhere, so the tiny thresholds call that "hard" (the stage
  # machinery runs; the labels mean nothing) and Stage 1 takes hard math.
  # The world's QA (fictional entities) is unanswerable without search: score it with the
  # retrieval prompt, the others with CoT (multiple choice then sits near the 1/4 guess).
  c.ur2.difficulty.update(dict(rollouts=2 if tiny else 4, chunk=48 if tiny else 64,
                               retrieval_tasks=("qa",)))
  levels = (("easy", 0.8), ("medium", 0.5), ("hard", 0.0 if tiny else 0.2))
  c.data.stages = {"ur2_curriculum": dict(
      mode="curriculum", counts={}, ratios={"qa": QA_RATIOS, "math": MATH_RATIOS,
                                            "mcq": QA_RATIOS},
      substitute={}, keep=("easy", "medium", "hard"), levels=levels,
      shortage="take_all" if tiny else "error")}
  c.ur2.stage1.update(dict(num_steps=1 if tiny else 5))
  c.ur2.stage1.data = dict(tasks=("math",), keep=("hard",) if tiny else ("very_hard",),
                           ratios={}, mode="uniform", counts={}, levels=levels,
                           shortage="error")
  # Raw passages: no summariser model comes with the world (the paper's prompts are long
  # English); `--config.ur2.knowledge.mode=summary --config.retriever.url=<served proxy>` runs
  # the summarising proxy (tests/test_recipe_ur2.py does, with a small in-process model).
  c.ur2.knowledge.mode = "raw"
  # Cold start: SFT on UR²-grammar traces through the real engine (as the world recipe), so
  # even the tiny policy writes queries (and the proxy is exercised) and answers.
  c.sft.update(dict(steps=50 if tiny else 400, batch_size=16 if tiny else 32,
                    lr=1e-2 if tiny else 5e-3,
                    warmup_steps=5 if tiny else 40, min_lr_ratio=0.1, weight_decay=0.01,
                    gather=True, context_weight=0.0 if tiny else 0.5,
                    log_every=10))
  # (decision shares as the world's traces: ragjax.data.world_traces; all right here)
  c.traces = common.ConfigDict(dict(wasted_query_rate=0.15, no_search_rate=0.0,
                                    first_hop_stop_rate=0.0, give_up_rate=0.0, chunk=64))
