"""ReZero (Dao & Le 2025, "Enhancing LLM search ability by trying one-more-time"): GRPO with
LoRA, six reward functions including the retry reward, and a frozen-base judge.

  --config=configs/rezero.py:tiny                    tiny policy on the synthetic world (CPU)
  --config=configs/rezero.py:llama-3.2-3b-instruct   the run behind the paper's Figure 2
  --config=configs/rezero.py:llama-3.2-3b-instruct-paper   the paper's text (§3.3-§4): four
                                                     reward functions, retries after the first,
                                                     noise injected at search time
  --config=configs/rezero.py:world                   the embedded world's scale (configs/world.py's
                                                     cold start, then ReZero's GRPO with LoRA)
  --config=configs/rezero.py:smollm2                 SmolLM2-135M on HotpotQA (configs/smollm2.py's
                                                     model, data and sizes; `smollm2-tiny`: CI),
                                                     SmolLM2 itself the judge

Which run produced the paper's numbers (46.88% at step 250 vs the baseline's 25.00% at 350):
the authors' README "Experiments" table (menloresearch/ReZero, README.md) and
docs/experiment-log.md (commit e316308) name it: run 250404-...-grpo-03, reward weights
[4, 2, 1, 1, 1, 1] over six functions (correctness, format, retry, em_chunk, search_strategy,
search_diversity; train_grpo.py at 1a18cd7), the retry reward paying for every search
(src/rewards.py reward_retry: 0.2 + 0.15 min(n, 5) from the first search), and an index of the
341 chunks alone (data/index.faiss, 523,821 bytes = 341 x 384 float32 vectors, committed
2025-04-03; the paraphrase "noise" rows arrived 2025-04-16, after both runs).  Its baseline is
"the same without the retry reward function" (run 250409-...-no-retry).  So the default is
that run, and the paper's text (four functions, the baseline three; "a positive reward for
each subsequent <search> query issued after the first one"; noise injection) is the `-paper`
argument.  Either baseline is one field: --config.rl.rewards.rezero_retry=0.0.

The real size needs `model.checkpoint` (Llama-3.2-3B-Instruct as an HF directory),
`data.train_files` / `data.dev_files` (FlashRAG jsonl whose `metadata.chunk_content` is each
question's gold chunk, e.g. the Apollo 13 QA set of ReZero's code) and `retriever.index` or
`retriever.url`.  Everything follows seeds_ur2_rezero.md Part B (the code at its experiment-era
commit):
  - protocol: Search-R1 tags, each result list a user message, the last `<search>` of a
    message wins, a message without one ends the chat, 20 turns, 4096 new tokens in all,
    1024 per message, top-2, temperature 0.9;
  - rewards with the code's weights [4, 2, 1, 1, 1, 1] (correctness, format, retry, em_chunk,
    strategy, diversity); correctness asks the judge, which is the frozen base model (the
    policy without LoRA) in this process (`judge.kind="base"`), at temperature 0.1;
  - GRPO as the code runs it: group std with eps 1e-4, one on-policy gradient step per batch
    (the ratio is 1, so its clip never acts), KL 0.04 (k3) against the base (adapters
    disabled), token-mean, AdamW lr 5e-6 (b2 0.99, weight decay 0.1), cosine with 10% warmup,
    gradient clipping at 0.1, 1 prompt x 8 samples per step, 1000 steps;
  - LoRA rank 64, alpha 64 on q, k, v, o, gate, up, down (init seed 3407).
Decisions ([D] in the spec): `</search>` is a stop string; the end-of-turn token is trained
on; the judge sees the whole last message as the code's judge did (`judge_input=answer`: the
`<answer>` content only, which a `<think>` cannot talk round; the tiny config's); the prompt date is pinned to the paper's runs
(04 Apr 2025; the code writes today's date, which would change a resumed run's prompt); the
base weights are bf16, not 4-bit (no QLoRA here); evaluation reports EM/F1 beside the judge.

Ablations, one field each:
  --config.rl.rewards.rezero_retry=0.0                         the paper's baseline (no retry)
  --config.rl.reward_kwargs.rezero_retry.retry_counting=after_first   the paper's reading
  --config.retriever.noise.kind=drop_gold --config.retriever.noise.p=0.3
                                   noise: paraphrase | replace | shuffle | drop_gold, and its p
The `-paper` argument's noise ([D]: the paper names neither a mechanism nor a rate): `shuffle`
with p 0.3, "randomly perturbing the relevance ... of returned chunks for some queries" (§3.4):
for 30% of queries the top-2 are drawn at random from the top-10.  The authors' later code
adds ~3 LLM paraphrases per chunk to the index instead: `python -m ragjax.retrieval.noisy
--corpus C --out C_noisy.jsonl --paraphrases 3`, then index that corpus.
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)
smollm2 = sibling(__file__, "smollm2")  # (configs/smollm2.py: the real model on a CPU)

SIZES = {"tiny": "tiny", "llama-3.2-3b-instruct": "llama-3.2-3b",
         "llama-3.2-3b-instruct-paper": "llama-3.2-3b"}
# The run behind Figure 2 (README "Experiments", exp 250404-grpo-03): six functions, the code's
# weights.  The paper's text (§3.3, §4): four functions; the weights are not given, so the
# code's for those four.
CODE_REWARDS = {"rezero_correctness": 4.0, "rezero_format": 2.0, "rezero_retry": 1.0,
                "rezero_em_chunk": 1.0, "rezero_strategy": 1.0, "rezero_diversity": 1.0}
PAPER_REWARDS = {"rezero_correctness": 4.0, "rezero_format": 2.0, "rezero_retry": 1.0,
                 "rezero_em_chunk": 1.0}
PAPER_NOISE = dict(kind="shuffle", p=0.3, seed=0, depth=10)
PROMPT_DATE = "04 Apr 2025"      # the paper's runs (250404-...); see the docstring


def plan(c):
  """Derived quantities beyond ragjax.planning.plan's: the whole-chat token cap, the reward set
  and weights, the retry counting, the noise, the judge, LoRA, the evaluation cadence."""
  caps = [x for x in (c.rollout.max_response_tokens, c.protocol.get("max_response_tokens")) if x]
  weights = {k: float(w) for k, w in c.rl.rewards.items() if w}
  retry = dict(c.rl.reward_kwargs.get("rezero_retry", {}) or {})
  return {"response_tokens": min(caps) if caps else 0,
          "reward_functions": sorted(weights), "reward_weights": weights,
          "retry_counting": retry.get("retry_counting", "all_searches")
                            if "rezero_retry" in weights else "none",
          "noise_injection": bool(c.retriever.noise.kind), "judge": c.judge.kind,
          "judge_input": dict(c.rl.reward_kwargs.get("rezero_correctness", {}) or {}).get(
              "judge_input", "answer"),
          "lora_rank": c.model.lora.rank, "lora_alpha": c.model.lora.alpha,
          "eval_every": c.trainer.eval_every, "eval_questions": c.trainer.eval_prompts}


def world_config(toy: bool = False):
  """configs/world.py's world and cold start, then ReZero's RL: its protocol (with a short
  prompt a from-scratch policy can use; observations inline, the world has no chat format),
  the six reward terms and ReZero's GRPO with LoRA, under a noisy retriever (each gold passage
  dropped with probability 0.5).  Decisions for this scale: exact match stands in for the judge
  (a from-scratch policy of the world cannot read the judge prompt), LoRA rank 8 (the policy
  is 128 wide) at lr 1e-3, the world's steps and batch, and a stop after `</answer>` (the
  world's cold-start traces end there, without an end-of-turn token).  For
  `python -m ragjax.ablate`."""
  world = sibling(__file__, "world")
  c = world.get_config("toy" if toy else "default")
  c.workdir = "runs/rezero_world"
  c.protocol = common.protocol("rezero", "top_k", prompt="Question: {question}\n", max_turns=4,
                               max_response_tokens=448, stop_on_search=True,
                               stop_on_answer=True, today=PROMPT_DATE, obs_max_tokens=160)
  c.retriever.noise.update(dict(kind="drop_gold", p=0.5, seed=0))
  c.model.lora.update(dict(rank=8, alpha=16.0, seed=3407))
  c.rl.update(dict(adv_eps=1e-4, kl_coef=0.04, kl_estimator="k3", loss_agg="token-mean",
                   use_sampler_logprobs=False, ppo_epochs=1, mini_batch_size=0))
  c.rl.rewards = {"em": 4.0, "rezero_format": 2.0, "rezero_retry": 1.0, "rezero_em_chunk": 1.0,
                  "rezero_strategy": 1.0, "rezero_diversity": 1.0}
  c.rl.reward_kwargs = {"rezero_retry": {"retry_counting": "all_searches"}}
  c.optim.update(dict(lr=1e-3, schedule="cosine", warmup_ratio=0.1, b2=0.99, weight_decay=0.1,
                      grad_clip=0.1))
  return c


def smollm2_config(arg: str):
  """`smollm2` / `smollm2-tiny`: configs/smollm2.py (default / tiny) with ReZero's chat protocol
  (its code's prompt, results as user turns, `</search>` a stop string; the cold start scripts
  Search-R1's turns, whose tags ReZero shares), five of the six reward functions with the
  code's weights (not em_chunk: these records name no gold chunk), and the judge: the policy
  as loaded (`judge.kind="base"`), i.e. SmolLM2 after the
  cold start, grading the `<answer>` content.  docs/methods/rezero.md says what else changes."""
  c = smollm2.variant("rezero", arg)
  p = c.protocol
  # smollm2's searches, plus the answering call (ReZero's chat has no final turn of its own)
  c.protocol = common.protocol("rezero", top_k=p.top_k, max_turns=p.max_turns + 1,
                               obs_max_tokens=p.obs_max_tokens, max_response_tokens=None,
                               stop_on_search=True, stop_on_answer=True, today=PROMPT_DATE)
  # no em_chunk: the HotpotQA records name no gold chunk (chunk_content, supporting_paragraphs
  # or supporting_ids) for it to look for
  c.rl.rewards = {k: w for k, w in CODE_REWARDS.items() if k != "rezero_em_chunk"}
  # the <answer> content, not the whole message: a 135M judge reads a short input best
  c.rl.reward_kwargs = {"rezero_correctness": {"judge_input": "answer"},
                        "rezero_retry": {"retry_counting": "all_searches"}}
  c.rl.metrics = ("search_r1",)
  c.judge.update(dict(kind="base", model="rezero-judge", max_batch=16,
                      max_prompt_tokens=512, max_new_tokens=16))
  return c


def get_config(arg: str = "tiny"):
  arg = common.config_arg(arg, [*SIZES, "world", *smollm2.VARIANTS])
  if arg == "world":
    return world_config()
  if arg in smollm2.VARIANTS:
    return smollm2_config(arg)
  tiny = arg == "tiny"
  paper = arg.endswith("-paper")
  c = common.get_config()
  c.recipe = "rl"           # the generic RL recipe: ReZero is config + plug-ins
  c.workdir = f"runs/rezero_{arg}"
  c.hardware = "" if tiny else "h200x1"      # ReZero trained on one H200 (§B4)
  c.model.update(dict(preset=SIZES[arg], checkpoint="", dtype="float32" if tiny else "bfloat16",
                      param_dtype="float32" if tiny else "bfloat16", scan_layers=not tiny,
                      remat=not tiny))
  c.model.lora.update(dict(rank=4 if tiny else 64, alpha=4.0 if tiny else 64.0, seed=3407,
                           targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                    "up_proj", "down_proj")))

  c.rl.update(dict(
      advantage="grpo", group_size=4 if tiny else 8, adv_eps=1e-4, clip_low=0.2, clip_high=0.2,
      loss_agg="token-mean", kl_coef=0.04, kl_estimator="k3", kl_in_reward=False,
      entropy_coef=0.0, use_sampler_logprobs=False, ppo_epochs=1,
      mini_batch_size=0, micro_batch_size=0))
  c.rl.rewards = dict(PAPER_REWARDS if paper else CODE_REWARDS)
  # the judge reads the whole last message, as src/rewards.py did for Figure 2 (tiny: the
  # <answer> content only, --config.rl.reward_kwargs.rezero_correctness.judge_input=answer)
  c.rl.reward_kwargs = {"rezero_correctness": {"judge_input": "answer" if tiny else "message"},
                        "rezero_retry": {"retry_counting": "after_first" if paper
                                         else "all_searches"}}
  c.judge.update(dict(kind="base", model="rezero-judge", max_batch=8 if tiny else 16,
                      max_prompt_tokens=1024 if tiny else 4096, max_new_tokens=32))
  c.optim.update(dict(lr=1e-3 if tiny else 5e-6, schedule="cosine", warmup_steps=0,
                      warmup_ratio=0.1, min_lr_ratio=0.0, clock="update",
                      total_steps=10 if tiny else 1000,
                      b1=0.9, b2=0.99, weight_decay=0.1, grad_clip=0.1))
  c.trainer.update(dict(
      num_steps=10 if tiny else 1000, batch_prompts=2 if tiny else 1,
      eval_every=5 if tiny else 50, eval_prompts=8 if tiny else 32,
      save_every=5 if tiny else 50, max_to_keep=2, keep_best_metric="dev/em", keep_best=True))

  c.data.source = "files"
  c.protocol = common.protocol("rezero", "top_k", "max_turns", "max_response_tokens",
                               stop_on_search=True, today=PROMPT_DATE)
  c.sampler.update(dict(max_cache_length=6144, max_new_tokens=1024, temperature=0.9, top_p=1.0,
                        prompt_buckets=(512, 1024)))
  c.rollout.widths = (1024, 2048, 3072, 4096, 5120, 6144)
  c.retriever.noise.update(PAPER_NOISE if paper else dict(kind="", p=0.0, seed=0))
  c.eval.batch_size = 32
  if not tiny:   # the experiment-era code: NoInstruct-small over the 341 report chunks, FAISS
    # from_documents (a flat, exact index; src/embeddings.py, scripts/generate_data.py)
    c.retriever.pin.update(dict(encoder="NoInstruct-small-Embedding-v0", index="exact",
                                passages=341))
  if tiny:   # the synthetic world (no weights or corpus to download), BM25, short chats
    common.tiny_world(c)
    # ReZero's long instruction is ~750 tokens under the world's small tokenizer
    c.protocol.update(dict(max_turns=3, max_response_tokens=160))
    c.sampler.update(dict(max_cache_length=1024, max_new_tokens=32, prompt_buckets=(768, 896)))
    c.rollout.widths = tuple(range(768, 1025, 64))
    c.eval.batch_size = 8
  return c
