"""The UR² recipe (seeds_ur2_rezero.md Part A): difficulty-scored data, Stage 1, then Stage 2 on
the curriculum, over UR²'s knowledge access.

    python -m ragjax.train --config=configs/ur2.py:tiny

Wires, in order (`start` is what every arm of `python -m ragjax.ablate` shares):
  1. data with a task per question: question files (`data.{train,dev,test}_files` entries
     "TASK:[FORMAT:]PATH", FORMAT defaulting to the task's reader; plus the QA questions
     `data.split` draws from its files, split as the qa recipe splits them), the training
     questions of each task capped at `ur2.max_per_task` (a seeded sample; 0 = all), or the
     synthetic world with multiple-choice and arithmetic questions added
     (`ragjax.data.world_tasks`);
  2. knowledge access (`ur2.knowledge`): the summarising proxy (served at `retriever.url`, or in
     process over `retriever.index` / the world's index with a summariser model), or raw
     passages; per-task corpus routing (`ur2.knowledge.routes`);
  3. the policy, cold-started with SFT on UR²-grammar traces when `sft.steps` > 0 (the world's
     scripted traces, or for question files `traces.questions` training questions scripted
     from their gold answers: `ragjax.rl.search_traces.ur2_script`);
  4. difficulty: score files (`ur2.difficulty.files`) or N CoT rollouts of this policy;
  5. Stage 1 (`ur2.stage1.mode="full"`): its own RL run in `<workdir>/stage1` on very_hard
     math with the Stage-1 rewards, exported to `<workdir>/stage1/policy`;
then `run` trains Stage 2 from Stage 1's weights in `<workdir>/rl` (the config's `rl`,
`trainer`, and `data.stages` curriculum) and exports `<workdir>/policy`.  Each stage resumes
from its own checkpoints, so a killed run restarts where it stopped.
"""

from __future__ import annotations

import os
import random
import time

from ragjax.data.readers import READERS, as_record, read_examples
from ragjax.wiring import components as parts
from ragjax.wiring.chat_services import MODEL_KINDS, check_chat, make_chat
from ragjax.rl.run_config import parse_run_config
from ragjax.recipes.cached_phase import COLD_START_DIR, cached_phase, config_fields

STAGE1_DIR = "stage1"
TASKS = ("qa", "math", "mcq")
KNOWLEDGE_MODES = ("summary", "raw")
STAGE1_MODES = ("full", "off")


# --- 1. data ------------------------------------------------------------------------------------
def parse_file_spec(spec: str) -> tuple[str, str, str]:
  """"TASK[/SOURCE]:[FORMAT:]PATH" -> (task, format, path); the format defaults to the task's
  reader; `file_source` reads the SOURCE."""
  task, sep, rest = str(spec).partition(":")
  if not sep or task.partition("/")[0] not in TASKS or task.endswith("/"):
    raise ValueError(f"UR² question file {spec!r}: write TASK[/SOURCE]:[FORMAT:]PATH with TASK "
                     f"one of {TASKS} (e.g. 'math:/data/train_math.jsonl', "
                     f"'qa:verl:/data/qa.parquet', 'mcq/medicine:/data/medqa.jsonl')")
  task = task.partition("/")[0]
  fmt, sep, path = rest.partition(":")
  if sep and fmt in READERS:
    return task, fmt, path
  return task, task, rest


def file_source(spec: str) -> str:
  """The SOURCE of a "TASK/SOURCE:..." file spec ("" when none): the curriculum's per-source
  pools (`data.stages.ur2_curriculum.counts` keys "task:source")."""
  return str(spec).partition(":")[0].partition("/")[2]


def read_task_files(specs) -> list[dict]:
  out = []
  for spec in specs:
    task, fmt, path = parse_file_spec(spec)
    source = file_source(spec)
    extra = {"source": source} if source else {}
    out += [dict(as_record(e), task=task, **extra) for e in read_examples(path, fmt)]
  return out


def load(c, workdir: str) -> parts.Setup:
  if c.data.source == "world":
    from ragjax.data.world_tasks import world_task_splits
    setup = parts.load_data(c, workdir, retriever=False)
    setup.splits = world_task_splits(setup.splits, seed=c.seed, **c.ur2.world_tasks.to_dict())
    return setup
  drawn = (parts.question_splits(c, own_files=False) if parts.split_config(c).files
           else {})
  splits = {split: [dict(r, task=r.get("task") or "qa") for r in drawn.get(split, [])]
            + read_task_files(getattr(c.data, f"{split}_files"))
            for split in ("train", "dev", "test")}
  splits["train"] = cap_per_task(splits["train"], int(c.ur2.max_per_task), c.seed)
  return parts.Setup(splits, None)


def cap_per_task(records, cap: int, seed: int) -> list[dict]:
  """At most `cap` records of each task (a seeded sample, in the records' order; 0 = all)."""
  if not cap:
    return list(records)
  rng = random.Random(f"ur2-max-per-task:{seed}")
  keep = set()
  for task in TASKS:
    idx = [i for i, r in enumerate(records) if r.get("task") == task]
    keep |= set(idx if len(idx) <= cap else rng.sample(idx, cap))
  return [r for i, r in enumerate(records) if i in keep]


# --- 2. knowledge access ------------------------------------------------------------------------
def _source(where: str, c):
  if where.startswith(("http://", "https://")):
    from ragjax.retrieval import SearchClient
    return SearchClient(where, timeout=c.retriever.timeout, deadline=c.retriever.deadline)
  from ragjax.retrieval import open_index
  return open_index(where, cache_size=c.retriever.cache_size)


def summariser(c):
  """The in-process summariser (None: none configured): one ChatModel, or {"default": ...,
  "math": ...} when `ur2.knowledge.math_summariser` has its own model (the code's router: math
  queries to Qwen-3, the rest to GPT).  Each is a chat_service section (`make_chat`)."""
  chat = make_chat(c, "ur2.knowledge.summariser", MODEL_KINDS)
  math = (make_chat(c, "ur2.knowledge.math_summariser", MODEL_KINDS)
          if "math_summariser" in c.ur2.knowledge else None)
  if chat is None or math is None:
    return chat
  return {"default": chat, "math": math}


def check_services(c) -> None:
  """Every model service the config names has an endpoint, before any work: the paper's
  summarisers and math judge are named at real sizes and the user supplies them (or switches
  them off by the field each message names)."""
  k = c.ur2.knowledge
  if k.mode == "summary" and not c.retriever.url:
    for name, off in (("summariser", "ur2.knowledge.mode='raw' (the paper's 'w/o LLM summary' "
                                     "ablation)"),
                      ("math_summariser", "ur2.knowledge.math_summariser.model='' (the "
                                          "summariser then serves math too)")):
      s = k.get(name)
      if s is None or (name == "math_summariser" and not s.model):
        continue
      if not check_chat(c, f"ur2.knowledge.{name}", MODEL_KINDS):
        paper = f" (the paper's: {s.model})" if s.model else ""
        raise ValueError(f"ur2.knowledge.{name}{paper} needs ur2.knowledge.{name}.url (an "
                         f"OpenAI-compatible server) or .checkpoint (an HF directory), or "
                         f"retriever.url of a served proxy; or {off}")
  j = c.judge
  if j.kind == "url" and not j.url:
    raise ValueError(f"UR²'s math judge (judge.model={j.model!r}, the paper's) needs judge.url "
                     f"(an OpenAI-compatible server), or judge.kind='checkpoint' with "
                     f"judge.checkpoint; judge.kind='' scores math by the rule check alone")


def open_knowledge(c, workdir: str, setup: parts.Setup):
  """UR²'s retrieval: corpus routes by task over the config's retriever, summarised or raw."""
  from ragjax.retrieval.routing import RoutedRetriever
  k = c.ur2.knowledge
  if k.mode not in KNOWLEDGE_MODES:
    raise ValueError(f"ur2.knowledge.mode must be one of {KNOWLEDGE_MODES}, got {k.mode!r}")
  base = parts.open_retriever(c, workdir, setup.corpus_path)
  routes = {task: _source(where, c) for task, where in k.routes.items() if where}
  inner = RoutedRetriever({"default": base, **routes}) if routes else base
  if k.mode == "raw":
    return inner
  chat = summariser(c)
  if chat is None:
    info = base.health() if hasattr(base, "health") else {}
    if not c.retriever.url or "summariser" not in info:
      raise ValueError("ur2.knowledge.mode='summary' needs a summariser: retriever.url of a "
                       "served proxy (python -m ragjax.services.proxy) or "
                       "ur2.knowledge.summariser (url or checkpoint); "
                       "ur2.knowledge.mode='raw' for raw passages")
    if routes:
      raise ValueError("ur2.knowledge.routes with a served proxy: give the routes to the proxy "
                       "(--route qa=...), not to the trainer")
    return base
  from ragjax.services.proxy import SummarisingRetriever
  return SummarisingRetriever(inner, chat, task=c.protocol.task, mode=k.prompt,
                              max_tokens=k.summariser.max_new_tokens or None,
                              on_error=k.on_error)


# --- 3. cold start (the world's traces, or real questions scripted) ---------------------------
def cold_start_records(records, seed: int) -> list[dict]:
  """Trace prompts: QA with retrieval, math and multiple choice half with, half without
  (seeded), so the policy knows both prompts before the curriculum assigns them."""
  rng = random.Random(f"ur2-cold-start:{seed}")
  return [dict(r, retrieval=r["task"] == "qa" or rng.random() < 0.5) for r in records]


def start_fingerprint(c) -> dict:
  """What the shared start depends on: everything but the Stage-2 run's own sections."""
  stage2 = ("rl.", "optim.", "trainer.", "data.stages", "critic_optim", "eval.", "workdir",
            "progress", "hardware", "cpu_threads", "cpu_isa", "mesh.")
  return config_fields(c, everything=True, skip=stage2)


def cold_start_scripts(c, records, tok=None) -> tuple[list, list]:
  """(records, their scripted turns): every training question's world trace, or for question
  files `traces.questions` of them (a seeded sample) scripted from their gold answers, of
  those whose every turn fits `sampler.max_new_tokens` (`tok`'s tokens: what a rollout could
  write)."""
  from ragjax.data.world_tasks import ur2_trace_turns
  from ragjax.data.world_traces import TraceShares
  from ragjax.typed_config import from_dict
  records = cold_start_records(records, c.seed)
  rng = random.Random(f"ur2-traces-{c.seed}")
  if c.data.source == "files":
    from ragjax.rl.search_traces import ur2_script
    cap = int(c.sampler.max_new_tokens)
    fits = [(r, turns) for r, turns in ((r, ur2_script(r)) for r in records)
            if tok is None or all(len(tok(t, add_special_tokens=False)["input_ids"]) <= cap
                                  for t in turns)]
    keep = sorted(rng.sample(range(len(fits)), min(int(c.traces.questions), len(fits))))
    parts.log(f"cold start: {len(keep)} traces scripted ({len(records) - len(fits)} of "
              f"{len(records)} training questions have a turn over sampler.max_new_tokens)")
    return [fits[i][0] for i in keep], [fits[i][1] for i in keep]
  shares = from_dict(TraceShares, {k: v for k, v in c.traces.items() if k != "chunk"},
                     "traces")
  return records, [ur2_trace_turns(r, rng, shares) for r in records]


def cold_start(c, workdir, setup, cfg, params, tok, mesh):
  from ragjax.recipes.qa import cold_start_adapter
  from ragjax.rl.sft import SFTConfig, run_sft
  from ragjax.rollout.factory import make_engine
  from ragjax.rl.teacher_traces import teacher_traces
  from ragjax.typed_config import from_dict
  cache = os.path.join(workdir, COLD_START_DIR)
  files = c.data.source == "files"
  fingerprint = config_fields(c, prefixes=(
      "seed", "world", "tokenizer", "model", "protocol", "sampler", "rollout", "sft", "traces",
      "ur2.world_tasks", "ur2.knowledge", "retriever.backend",
      *(("data.split", "data.train_files", "ur2.max_per_task") if files else ())))

  def reuse(_):
    if files:          # the model's own layout (e.g. scanned layers), as the qa recipe's
      cached = c.copy_and_resolve_references()
      with cached.unlocked():
        cached.model.checkpoint = cache
      return parts.load_policy(cached, mesh=mesh)[1]
    from ragjax.models.hf_io import load_decoder
    return load_decoder(cache)[1]

  def compute():
    records, scripts = cold_start_scripts(c, setup.splits["train"], tok)
    template = make_engine(c, cfg, params, tok, setup.retriever, greedy=True, hooks=[])
    rows_t, rows_l = teacher_traces(template, records, scripts,
                                    max_new_tokens=c.sampler.max_new_tokens,
                                    cache_length=c.sampler.max_cache_length,
                                    chunk=c.traces.chunk, seed=c.seed)
    trained, _ = run_sft(cfg, params, rows_t, rows_l, from_dict(SFTConfig, c.sft, "sft"),
                         c.rollout.widths, seed=c.seed, mesh=mesh,
                         log_path=os.path.join(workdir, "sft_metrics.jsonl"),
                         progress=c.progress, ckpt_dir=os.path.join(workdir, "sft"),
                         fingerprint=fingerprint, adapter=cold_start_adapter(c))
    parts.export_policy(cache, cfg, trained, tok)
    return trained, {}

  # the exported policy supersedes the SFT checkpoints
  return cached_phase(cache, fingerprint, compute=compute, reuse=reuse,
                      scratch=(os.path.join(workdir, "sft"),))


# --- 4. difficulty ------------------------------------------------------------------------------
def difficulty(c, workdir, setup, cfg, params, tok) -> None:
  """Puts `difficulty_score` on every record of `ur2.difficulty.splits` (the training one, and
  e.g. the test split for EM by difficulty): from the score files, or from N CoT rollouts of
  the start policy (resumable, under `<workdir>/difficulty`)."""
  from ragjax.eval.difficulty import attach_scores, read_scores, score_with_engine
  d = c.ur2.difficulty
  splits = tuple(d.get("splits", ("train",)))
  unknown = sorted(set(splits) - set(setup.splits))
  if unknown or "train" not in splits:
    raise ValueError(f"ur2.difficulty.splits={list(splits)}: needs 'train' and only splits the "
                     f"data has ({sorted(setup.splits)})")
  scores: dict = {}
  for path in d.files:
    scores.update(read_scores(path))
  if d.rollouts > 0:
    from ragjax.retrieval.types import NullRetriever
    from ragjax.rollout.factory import make_engine
    retriever = setup.retriever if d.retrieval_tasks else NullRetriever()
    engine = make_engine(c, cfg, params, tok, retriever, greedy=False, hooks=[])
    for split in splits:
      scores.update(score_with_engine(engine, setup.splits[split],
                                      os.path.join(workdir, "difficulty", f"{split}.jsonl"),
                                      n=d.rollouts, chunk=d.chunk, seed=c.seed,
                                      task=c.protocol.task,
                                      retrieval_tasks=tuple(d.retrieval_tasks)))
  if scores:
    for split in splits:
      setup.splits[split] = attach_scores(setup.splits[split], scores)
      labels: dict = {}
      for line in (scores[str(r["id"])] for r in setup.splits[split]):
        labels[line["label"]] = labels.get(line["label"], 0) + 1
      parts.log(f"difficulty ({split}): {labels}")


# --- 5. Stage 1 ---------------------------------------------------------------------------------
def stage1_config(c):
  """The Stage-1 run's config: Stage-1 rewards, steps and data, its own workdir."""
  s1 = c.ur2.stage1
  c1 = c.copy_and_resolve_references()
  c1.workdir = os.path.join(os.path.abspath(c.workdir), STAGE1_DIR)
  c1.rl.rewards = s1.rewards.to_dict()
  c1.rl.reward_kwargs = s1.reward_kwargs.to_dict()
  # (the LR schedule keeps Stage 2's span: the code's Stage-1 run spans 10,000 episodes of its
  # own data, so over its 10-15 steps the rate is 2e-6 either way)
  c1.trainer.num_steps = s1.num_steps
  c1.trainer.save_every = min(c.trainer.save_every, s1.num_steps)
  c1.trainer.eval_every = 0
  c1.trainer.keep_best = False
  c1.data.stages = {"ur2_curriculum": s1.data.to_dict()}
  return c1


def run_stage1(c, s: parts.Start):
  c1 = stage1_config(c)
  trainer = parts.make_trainer(c1, parse_run_config(c1), s.cfg, s.params, s.tokenizer, s.setup,
                               s.mesh)
  history = trainer.train()
  params = trainer.final_params()
  trainer.ckpt.close()
  parts.export_policy(os.path.join(c1.workdir, parts.POLICY_DIR), s.cfg, params, s.tokenizer)
  parts.log(f"stage 1: {c.ur2.stage1.num_steps} steps ({len(history)} run now)")
  return params


def check(c) -> None:
  check_services(c)
  if c.ur2.stage1.mode not in STAGE1_MODES:
    raise ValueError(f"ur2.stage1.mode must be one of {STAGE1_MODES}, got {c.ur2.stage1.mode!r}")
  if c.ur2.knowledge.mode not in KNOWLEDGE_MODES:
    raise ValueError(f"ur2.knowledge.mode must be one of {KNOWLEDGE_MODES}, got "
                     f"{c.ur2.knowledge.mode!r}")
  if c.ur2.stage1.mode == "full":
    parts.validate(stage1_config(c), question_files=False)
  if c.data.source == "files":
    if not (c.data.train_files or parts.split_config(c).files):
      raise ValueError("UR² with data.source='files' needs data.train_files (TASK:PATH entries) "
                       "or data.split.files")
    for split in ("train", "dev", "test"):
      for spec in getattr(c.data, f"{split}_files"):
        path = parse_file_spec(spec)[2]
        if not os.path.isfile(path):
          raise FileNotFoundError(f"data.{split}_files: {spec!r}: {path!r} is not a file")


def start(c) -> parts.Start:
  """Data, knowledge access, the policy (cold-started on the world), difficulty, Stage 1."""
  check(c)
  workdir = os.path.abspath(c.workdir)
  os.makedirs(workdir, exist_ok=True)
  t0 = time.perf_counter()
  setup = load(c, workdir)
  mesh = parts.make_mesh(c)
  cfg, params, tok = parts.load_policy(c, setup.tokenizer, mesh)
  setup.retriever = open_knowledge(c, workdir, setup)
  parts.log(f"data: { {s: len(v) for s, v in setup.splits.items()} } questions; knowledge "
            f"{c.ur2.knowledge.mode} ({time.perf_counter() - t0:.0f} s)")
  if c.sft.steps > 0:
    t0 = time.perf_counter()
    params = cold_start(c, workdir, setup, cfg, params, tok, mesh)
    parts.log(f"cold start: {time.perf_counter() - t0:.0f} s")
  t0 = time.perf_counter()
  difficulty(c, workdir, setup, cfg, params, tok)
  parts.log(f"difficulty: {time.perf_counter() - t0:.0f} s")
  s = parts.Start(setup, cfg, params, tok, mesh)
  if c.ur2.stage1.mode == "full":
    t0 = time.perf_counter()
    s.params = run_stage1(c, s)
    parts.log(f"stage 1: {time.perf_counter() - t0:.0f} s")
  return s


def run(c) -> dict:
  check_services(c)
  run_cfg = parts.validate(c, question_files=False)     # (the task files: `check`)
  parts.check_resume(c)
  workdir = os.path.abspath(c.workdir)
  s = start(c)
  trainer = parts.make_trainer(c, run_cfg, s.cfg, s.params, s.tokenizer, s.setup, s.mesh)
  history = trainer.train()
  params = trainer.final_params()
  trainer.ckpt.close()
  policy = parts.export_policy(os.path.join(workdir, parts.POLICY_DIR), s.cfg, params,
                               s.tokenizer)
  parts.log(f"stage 2: trained {len(history)} steps; policy in {policy}")
  return {"steps": len(history), "workdir": workdir, "policy": policy,
          "last": history[-1] if history else {}}
