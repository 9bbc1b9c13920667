"""Signature worlds: one world per method in which the failure its paper targets is what
decides success, and the A/B run that shows its mechanism at work (issue 42; results in
BENCHMARKS.md, "Method signatures"; each design and its runs in docs/benchmarks/signatures.md).

  python -m ragjax.ablate --config=configs/signatures.py:search_r1     # its A/B, about 25 min
  python -m ragjax.ablate --config=configs/signatures.py:search_r1-toy # the same in a minute
  python -m ragjax.train --config=configs/signatures.py:r3_rag --config.stage=data   # R3-RAG:
  python -m ragjax.train --config=configs/signatures.py:r3_rag --config.stage=sft    # first

Every variant is configs/world.py (or a method's `world` config) with the deltas that make its
failure dominant, documented where they are set, and its arms are compared after the same
number of steps (the final policies, no keep-best); `rl.signatures` names the metric the paper's
claim is about (`ragjax.eval.signatures`), logged every RL step and compared question by
question by `python -m ragjax.ablate`; the config's `ablation` section holds its two arms
(`ARMS`), so the command needs no --a / --b.
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")

METHODS = ("search_r1", "rezero", "autorefine", "r3_rag", "rex_rag", "ur2")
# the methods combined (configs/combined.py) on AutoRefine's world, against AutoRefine alone
VARIANTS = METHODS + ("combined",)
ARGS = VARIANTS + tuple(m + "-toy" for m in VARIANTS)    # every valid config argument

# method -> (arm A, arm B) of its `python -m ragjax.ablate` command (the `ablation` section)
ARMS = {
    "search_r1": ("cold_start:start", "grpo:"),
    "rezero": ("three_rewards:rl.rewards.rezero_retry=0.0", "four_rewards:"),
    "autorefine": ("no_retrieval_reward:rl.reward_kwargs.autorefine.refine_score=0.0",
                   "retrieval_reward:"),
    "r3_rag": ("outcome_only:rl.reward_kwargs.r3_rag.process=False", "step_level:"),
    "rex_rag": ("probes_off:rex_rag.p=0.0", "probes_on:"),
    "ur2": ("uniform:data.stages.ur2_curriculum.mode='uniform';"
            "data.stages.ur2_curriculum.keep=('easy','medium','hard','very_hard')",
            "curriculum:"),
    "combined": ("autorefine_alone:rex_rag.p=0.0;rl.rewards.search_retry=0.0", "combined:"),
}
# method -> the `python -m ragjax.train --config.stage=...` runs before its ablation (R3-RAG's
# cold start is a recipe stage of its own: teacher trajectories, then SFT)
PREPARE = {"r3_rag": ("data", "sft")}


def search_r1(toy: bool):
  """Multi-hop made dominant: 70% of the questions are 2-hop, the cold start always searches
  first and stops after the first hop in half of its 2-hop traces, so whether the second hop
  is searched is the decision that decides a 2-hop question.  (First design, 2026-11-27:
  stopping in 60% and answering without a search in 30% of the traces: the cold start then
  sampled a second search in 2 of 240 rollouts of 2-hop questions, and 120 GRPO steps left
  2-hop EM at 0 in both arms; docs/benchmarks/signatures.md.)  Signature: 2-hop EM, GRPO vs
  its own cold start."""
  c = sibling(__file__, "world").get_config("toy" if toy else "default")
  c.workdir = "runs/signature_search_r1" + ("_toy" if toy else "")
  c.world.qtype_weights = (("1hop", 0.3), ("2hop", 0.7))
  c.traces.update(dict(no_search_rate=0.0, first_hop_stop_rate=0.5))
  c.trainer.num_steps = 1 if toy else 300
  c.rl.signatures = ("two_hop_em",)
  return c


def rezero(toy: bool):
  """The first search fails by construction: 60% of the questions are the world's 'retry'
  questions (the person shares the full name with namesakes, so the obvious query finds a
  namesake's passage and only a query with the occupation finds theirs), and the cold start
  gives up after that failed search in 60% of its traces (answering with the namesake's
  value).  ReZero's RL (configs/rezero.py:world) with the paper's four rewards (§3.3:
  correctness, format, retry counted after the first search, EM in the chunk; the judge's
  correctness is EM here) against its baseline's three.  Full fine-tuning at the world's
  learning rate instead of ReZero's LoRA: LoRA rank 8 left the 0.9M policy's predictions
  unchanged in 30 steps (docs/benchmarks/ablations.md, the 2026-11-24 ablation).  Signatures:
  the share of failed first searches followed by another search; EM on those questions."""
  c = sibling(__file__, "rezero").world_config(toy)
  c.workdir = "runs/signature_rezero" + ("_toy" if toy else "")
  c.world.qtype_weights = (("1hop", 0.4), ("retry", 0.6))
  c.world.retry_groups = 12 if toy else 24   # namesake groups enough for 60% retry questions
  c.traces.no_search_rate = 0.3
  c.retriever.noise.update(dict(kind="", p=0.0))    # the namesakes are the failure
  c.model.lora.rank = 0
  c.rl.rewards = {"em": 4.0, "rezero_format": 2.0, "rezero_retry": 1.0, "rezero_em_chunk": 1.0}
  c.rl.reward_kwargs = {"rezero_retry": {"retry_counting": "after_first"}}
  c.optim.update(dict(lr=3e-4, schedule="constant", warmup_ratio=0.0, weight_decay=0.0,
                      grad_clip=1.0))
  # 160 steps: at 80 the four-reward arm's sampled retry rate was 0.42 and rising, and its
  # greedy policy retried after 3 of 65 failed searches (docs/benchmarks/signatures.md)
  c.trainer.num_steps = 1 if toy else 160
  c.rl.signatures = ("retry_after_failed_search", "em_after_failed_search")
  return c


def autorefine(toy: bool):
  """A refine step the outcome reward cannot see: the cold start refines badly (its refine
  block says "not found" in 60% of the traces although the search found the value) and reads
  its answer off the documents, not off the refine block, answering a wrong value in 60% of
  the traces, the two drawn independently (`traces.refine_miss_rate`, `answer_miss_rate`).
  So whether a refine block holds the answer does not change the answer's reward: without the
  retrieval reward nothing teaches the refine step, and with it a wrong answer whose refine
  block holds the gold scores 0.1 instead of 0 (under GRPO's group normalisation, in a group
  whose answers are all wrong, as large an advantage as a right answer's 1).  The world as
  the second design: every person, group and work has a near-name twin (the default: 30%),
  passages mention other entities twice as often, three documents per search, the cold start
  always searches, 70% 1-hop questions.  AutoRefine's world config (its protocol, refining
  cold start, Eq. 3 reward) with and without the retrieval reward's 0.1.  Signature: the
  share of `<refine>` blocks that contain a gold answer.  (Earlier designs, 2026-11-27, both
  with a cold start whose refine blocks always held the value found and whose answer copied
  them: half 1-hop with 60% of the traces answering without a search, -0.010 [-0.035, 0.015];
  the second as here without the misses, -0.028 [-0.051, -0.005], the reward firing on 1 row
  of 192 in the arms' first three steps, as the answer copied the refine;
  docs/benchmarks/signatures.md.)"""
  c = sibling(__file__, "autorefine").world_config(toy)
  c.workdir = "runs/signature_autorefine" + ("_toy" if toy else "")
  c.world.update(dict(distractor_rate=1.0, mention_rate=0.6))
  c.world.qtype_weights = (("1hop", 0.7), ("2hop", 0.3))
  c.traces.update(dict(no_search_rate=0.0, refine_miss_rate=0.6, answer_miss_rate=0.6))
  c.protocol.top_k = 3
  c.trainer.num_steps = 1 if toy else 100
  c.rl.signatures = ("refine_has_answer",)
  return c


def r3_rag(toy: bool):
  """Long chains where only some steps retrieve the right document: every entity question is
  a bridge question of 2 or 3 hops (configs/r3_rag.py:world: at most 2), so a trajectory has
  several search steps and an outcome reward cannot tell which of them found its passage.
  R3-RAG's world config (cold start from the world's scripted teacher, SFT, step-level PPO
  with the gold-passage judge) on the embedded default's world and policy shape (16 training
  worlds, names by kind from a stock of 480 words, the 128-wide policy; configs/world.py),
  with twice the cold-start questions, and with and without the process (relevance) reward.
  Signature: the mean relevance of a search step (the share of the question's gold passages
  it retrieved).  (First design, 2026-11-27: R3-RAG's world config as it is, 4 training
  worlds and a 96-wide policy: its greedy steps retrieved 6% of the gold passages of the
  fresh test world (31% of the training worlds': the names memorised, not copied), it
  answered no test question, and the process reward moved nothing, +0.005 [-0.006, 0.018].
  Third: this world with the code's lambda_T = 1 + gamma,
  `--config.rl.reward_kwargs.r3_rag.lambda_form=one_plus_gamma`: reversed as with the
  paper's, the chains lengthening; docs/benchmarks/signatures.md.)"""
  c = sibling(__file__, "r3_rag").get_config("tiny" if toy else "world")
  c.workdir = "runs/signature_r3_rag" + ("_toy" if toy else "")
  if not toy:
    w = sibling(__file__, "world").get_config("default")
    c.world.update({k: w.world[k] for k in ("train_worlds", "num_people", "num_places",
                                            "num_orgs", "num_works", "name_lexicon",
                                            "name_classes")})
    c.world.num_train = 2400
    c.tokenizer.vocab_size = w.tokenizer.vocab_size
    c.model.update({k: w.model[k] for k in ("hidden_size", "intermediate_size", "num_layers",
                                            "num_heads", "num_kv_heads", "head_dim")})
    c.cold_start.max_questions = 1200
    c.r3.sft_epochs = 5
    c.world.max_hops = 3
    c.world.qtype_weights = (("1hop", 0.2), ("2hop", 0.8))
    c.trainer.num_steps = 30
  else:
    c.trainer.num_steps = 1          # (the other toys' one step; configs/r3_rag.py:tiny has 2)
  c.rl.signatures = ("step_relevance",)
  return c


def rex_rag(toy: bool):
  """A dead end: the cold start answers from memory (without searching) in 90% of its traces,
  and on this world's fictional entities such an answer is wrong, so most groups of samples
  end all wrong and teach plain GRPO nothing.  REX-RAG (configs/rex_rag.py: the clone hook at
  p = 20/101, the trajectory filter, the mu-corrected ratio) with the probe `<search>` in
  place of Table 8's English prompts, which this policy cannot read (on the embedded world
  they were right less often than fresh samples, docs/benchmarks/ablations.md): a wrong
  answer's clone keeps its reasoning and searches.  Probes on vs off (p = 0: no clones, so
  the filter and the correction have nothing to act on; everything else identical).
  Signatures: the share of test questions searched before answering (`searched`);
  `rex_rag/rescued`, the share of all-wrong groups a probe rescued (logged every step); test EM.
  (First design, 2026-11-27: the ReZero world's namesake questions, where the dead end is the
  obvious first query and the cold start gives up after it in 60%; void, as the engine then
  parsed a clone's turn without the probe it began with, so no clone's search was served;
  docs/benchmarks/signatures.md.)"""
  c = sibling(__file__, "world").get_config("toy" if toy else "default")
  sibling(__file__, "rex_rag").add_rex_rag(c)
  c.workdir = "runs/signature_rex_rag" + ("_toy" if toy else "")
  c.rex_rag.pool = "search"
  c.traces.no_search_rate = 0.9
  c.trainer.num_steps = 1 if toy else 80
  c.rl.signatures = ("searched",)
  return c


def ur2(toy: bool):
  """A hard tail: on UR²'s world config (the world's QA, multiple-choice and arithmetic tasks,
  a cold start, difficulty from 4 samples of the start policy) most training questions are
  ones the start policy almost never solves (very hard: 789 of 1,200 on 2026-11-27), so a
  group of their samples is all wrong and teaches nothing.  UR²'s curriculum (very hard left
  out, hard 7 : medium 2 : easy 1 for QA and multiple choice, easy filled from medium as the
  paper does for LLaMA, there being 8 easy questions) against no curriculum, the paper's
  Vanilla RL: the same number of questions drawn uniformly from all of them, the hard tail
  included.  Four times the steps of configs/ur2.py:world and twice its test questions (the
  second design's 60 steps and 104 medium / hard test questions gave +0.029 [-0.068, 0.125]).
  The test questions are scored by the
  same start policy, so test EM splits by difficulty too.  Signature: EM on the medium and
  hard questions (logged every step on the training draws; on test, by the start policy's
  difficulty).  (First design, 2026-11-27: the uniform arm drew from the kept levels only and
  easy was not substituted, so both arms trained on 80 questions, 40 QA and 40 multiple
  choice, each seen 12 times; the curriculum was worse, -0.163 [-0.273, -0.055]:
  docs/benchmarks/signatures.md.)"""
  c = sibling(__file__, "ur2").get_config("tiny" if toy else "world")
  c.workdir = "runs/signature_ur2" + ("_toy" if toy else "")
  c.ur2.difficulty.splits = ("train", "test")
  c.data.stages.ur2_curriculum.substitute = {"qa": {"easy": "medium"},
                                             "mcq": {"easy": "medium"}}
  if not toy:
    c.world.num_test = 400           # 800 test questions: about 200 medium / hard
    c.trainer.num_steps = 120
    c.optim.total_steps = 120
  c.rl.signatures = ("em_medium_hard",)
  return c


def combined(toy: bool):
  """The methods combined (configs/combined.py: AutoRefine's refine step and reward, ReZero's
  retry reward, REX-RAG's probes) on AutoRefine's signature world, against AutoRefine alone
  (the probes at p = 0, the retry reward at 0): the one signature world whose cold start the
  combination shares (ReZero's and REX-RAG's write no refine blocks).  The probe is `<search>`
  (pool `search`, as in REX-RAG's signature world): a wrong answer's clone searches again.
  Signatures: AutoRefine's (refine blocks holding a gold answer) and ReZero's (another search
  after a failed first one)."""
  c = autorefine(toy)
  c.workdir = "runs/signature_combined" + ("_toy" if toy else "")
  sibling(__file__, "rex_rag").add_rex_rag(c)
  c.rex_rag.pool = "search"
  sibling(__file__, "combined").add_rewards(c)
  c.rl.signatures = ("refine_has_answer", "retry_after_failed_search")
  return c


BUILDERS = {"search_r1": search_r1, "rezero": rezero, "autorefine": autorefine,
            "r3_rag": r3_rag, "rex_rag": rex_rag, "ur2": ur2, "combined": combined}


def get_config(arg: str = "search_r1-toy"):
  arg = common.config_arg(arg, ARGS, default="search_r1-toy")
  c = BUILDERS[arg.removesuffix("-toy")](arg.endswith("-toy"))
  # Both arms are compared after the same steps: the final policies.  Keep-best on dev EM
  # would pick each arm's step by a metric the mechanism may trade away early (ReZero's retry
  # reward lowered training EM while retries rose; 2026-11-27).
  c.trainer.keep_best = False
  a, b = ARMS[arg.removesuffix("-toy")]
  c.ablation = common.ConfigDict(dict(a=a, b=b))
  return c
