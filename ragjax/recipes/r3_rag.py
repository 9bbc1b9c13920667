"""The R3-RAG recipe: cold-start data -> SFT -> step-level PPO with judge rewards -> evaluation.

    python -m ragjax.train --config=configs/r3_rag.py:tiny [--config.stage=data|sft|rl|all]

Stages (each reuses what an earlier run of the same workdir left; see configs/r3_rag.py):
  data  teacher trajectories, rejection sampling, best-of-N (`ragjax.rl.r3_cold_start`) into
        `<workdir>/cold_start_data` (resumable; counts in summary.json);
  sft   their step samples through the real engine, `run_sft` (through `model.lora`'s
        adapters on every layer, merged, when it has a rank), exported as HF safetensors to
        `<workdir>/cold_start_policy` (R3-RAG-CS; kept when its inputs did not change);
  rl    PPO with a critic initialised from the cold-start policy (also the KL reference), every
        step a sample (`rl.step_samples`), the `r3_rag` step rewards with the run's judge as a
        model service; the policy exported to `<workdir>/policy`; then R3-RAG's evaluation
        (greedy, top-5 complete documents, 5 steps; ACC by the evaluation judge, EM and F1)
        of the cold-start and RL policies, into `<workdir>/results.{md,json}`.  ACC asks
        `eval.judge` (the paper's: Qwen2.5-72B-Instruct) and is reported as not computed
        without one; `r3.acc_judge="training"` asks the training judge (the small configs).
Model services (`teacher`, `judge`, `eval.judge`) come from their config sections
(`ragjax.wiring.chat_services`): an OpenAI-compatible URL, an HF checkpoint or the cold-start
policy in this process ("base"), the gold-passage rule judge, the synthetic world's scripted
teacher, or steps scripted from real questions' gold answers ("script").  This module only wires.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os

from ragjax.wiring import components as parts
from ragjax.wiring.chat_services import TEACHER_KINDS, check_chat, eval_chat, make_chat
from ragjax.rl.r3_cold_start import (ColdStartConfig, generate_cold_start, read_trajectories,
                                     sft_step_samples)
from ragjax.rl.sft import SFTConfig, run_sft
from ragjax.rollout.factory import make_engine
from ragjax.recipes.cached_phase import COLD_START_DIR, cached_phase, config_fields
from ragjax.recipes.qa import cold_start_adapter
from ragjax.models.lora import adapter_from_config
from ragjax.typed_config import from_dict, json_safe, write_json_atomic

STAGES = ("data", "sft", "rl", "all")
RL_SAMPLES = ("random", "first")
ACC_JUDGES = ("eval", "training")
DATA_DIR = "cold_start_data"
SFT_DIR = "sft_ckpt"            # SFT checkpoints every sft.save_every steps, until exported
# What the cold-start policy depends on (a cached one is reused only when all match).
SFT_SECTIONS = ("seed", "world", "tokenizer", "model", "protocol", "sampler", "rollout", "sft",
                "cold_start", "teacher", "data", "retriever")


def validate(c):
  run = parts.validate(c)
  if c.stage not in STAGES:
    raise ValueError(f"stage must be one of {STAGES}, got {c.stage!r}")
  from_dict(ColdStartConfig, c.cold_start, "cold_start")
  if c.stage in ("data", "all"):
    check_chat(c, "teacher", TEACHER_KINDS)
  kw = dict(run.rl.reward_kwargs.get("r3_rag", {}))
  if ("r3_rag" in run.rl.rewards and c.judge.kind == "" and
      (kw.get("process", True) or kw.get("answer_judge", True))):
    raise ValueError("the r3_rag reward asks the judge (relevance and Acc_model): set "
                     "judge.kind, or rl.reward_kwargs.r3_rag.process/answer_judge=False")
  if c.sampler.get("temperatures", ()) and run.rl.use_sampler_logprobs:
    raise ValueError("sampler.temperatures samples each row at its own temperature, so the "
                     "sampler's log-probs are not the policy's: set rl.use_sampler_logprobs=False")
  if c.r3.get("rl_sample", "first") not in RL_SAMPLES:
    raise ValueError(f"r3.rl_sample must be one of {RL_SAMPLES}, got {c.r3.rl_sample!r}")
  if c.r3.get("acc_judge", "eval") not in ACC_JUDGES:
    raise ValueError(f"r3.acc_judge must be one of {ACC_JUDGES}, got {c.r3.acc_judge!r}")
  if c.protocol.get("context", "restart") == "restart" and not run.rl.step_samples:
    raise ValueError("protocol.context='restart' prompts every step afresh: set "
                     "rl.step_samples=True")
  return run


def judge_chat(c, **kwargs):
  """The `judge` service (`make_chat`), its replies asked in at most `judge.max_new_tokens`
  tokens: the judges' templates ask for 512 (§3.3), which a server or in-process judge
  configured with a smaller budget refuses."""
  from ragjax.services.chat_model import ReplyBudget
  chat = make_chat(c, "judge", **kwargs)
  if chat is None or c.judge.kind not in ("url", "checkpoint", "base"):
    return chat
  return ReplyBudget(chat, int(c.judge.max_new_tokens))


def paths(c) -> dict:
  w = os.path.abspath(c.workdir)
  return {"workdir": w, "data": c.r3.data_dir or os.path.join(w, DATA_DIR),
          "cold_start": c.r3.policy or os.path.join(w, COLD_START_DIR),
          "policy": os.path.join(w, parts.POLICY_DIR)}


def protocol_variant(c, **fields):
  """A copy of the config with protocol fields replaced (the SFT and evaluation layouts)."""
  c = c.copy_and_resolve_references()
  c.protocol.update(fields)
  return c


# --- stages -----------------------------------------------------------------------------------
def cold_start_questions(c, setup) -> list:
  from ragjax.data.readers import as_record, read_examples
  if c.r3.cold_start_files:
    return [as_record(e) for f in c.r3.cold_start_files for e in read_examples(f)]
  return setup.splits["train"]


def data_stage(c, setup) -> dict:
  p = paths(c)
  cfg = from_dict(ColdStartConfig, c.cold_start, "cold_start")
  teacher = make_chat(c, "teacher", setup=setup)
  # the answer judge of rejection sampling (Acc_model); a "base" judge is the policy, which
  # this stage does not load: exact matching alone then
  judge = judge_chat(c, setup=setup) if c.judge.kind != "base" else None
  summary = generate_cold_start(cold_start_questions(c, setup), teacher, setup.retriever,
                                p["data"], cfg, judge=judge, progress=c.progress)
  parts.log(f"cold-start data: kept {summary['kept']} of {summary['questions']}, rejected "
            f"{summary['rejected']} -> {p['data']}")
  return summary


def sft_fingerprint(c, data_dir: str) -> dict:
  with open(os.path.join(data_dir, "trajectories.jsonl"), "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  keep = config_fields(c, sections=SFT_SECTIONS,
                       skip=("sampler.temperature", "teacher.url", "teacher.api_key_env",
                             "teacher.cache"))
  return {**keep, "r3.sft_epochs": c.r3.sft_epochs, "r3.sft_doc_chars": c.r3.sft_doc_chars,
          "r3.sft_warmup_ratio": c.r3.get("sft_warmup_ratio", 0.0),
          "trajectories_sha256": digest}


def sft_stage(c, setup) -> dict:
  """SFT on the step samples (or the cached cold-start policy); returns its summary."""
  p = paths(c)
  fingerprint = json_safe(sft_fingerprint(c, p["data"]))

  def compute():
    mesh = parts.make_mesh(c)
    cfg, params, tok = parts.load_policy(c, setup.tokenizer, mesh)
    records = read_trajectories(p["data"])
    if not records:
      raise ValueError(f"{p['data']}: the cold start kept no trajectory; nothing to train on")
    cs = from_dict(ColdStartConfig, c.cold_start, "cold_start")
    layout = protocol_variant(c, top_k=cs.top_k, max_turns=cs.max_steps, dedup_docs=True,
                              obs_max_chars=c.r3.sft_doc_chars or None, format_retries=0)
    engine = make_engine(layout, cfg, params, tok, setup.retriever, greedy=True, hooks=[])
    eos = tok.decode([cfg.eos_ids[0] if cfg.eos_ids else tok.eos_token_id])
    rows_t, rows_l, stats = sft_step_samples(engine, records, eos_text=eos,
                                             max_new_tokens=c.sampler.max_new_tokens,
                                             cache_length=c.sampler.max_cache_length,
                                             seed=c.seed)
    sft = from_dict(SFTConfig, c.sft, "sft")
    if c.r3.sft_epochs:
      sft = dataclasses.replace(sft, steps=math.ceil(c.r3.sft_epochs * len(rows_t)
                                                     / sft.batch_size))
    ratio = float(c.r3.get("sft_warmup_ratio", 0.0))
    if ratio:        # LLaMA-Factory / transformers: warmup = ceil(ratio x steps)
      sft = dataclasses.replace(sft, warmup_steps=math.ceil(ratio * sft.steps))
    parts.log(f"SFT: {stats['samples']} step samples from {stats['trajectories']} trajectories "
              f"({stats['incomplete']} replays did not reach their answer, "
              f"{stats['doc_mismatches']} steps retrieved other passages than stored), "
              f"{sft.steps} steps")
    os.makedirs(p["workdir"], exist_ok=True)
    params, history = run_sft(cfg, params, rows_t, rows_l, sft, c.rollout.widths, seed=c.seed,
                              mesh=mesh, log_path=os.path.join(p["workdir"], "sft_metrics.jsonl"),
                              progress=c.progress, ckpt_dir=os.path.join(p["workdir"], SFT_DIR),
                              fingerprint=fingerprint, adapter=cold_start_adapter(c))
    parts.export_policy(p["cold_start"], cfg, params, tok)
    summary = {**stats, "steps": sft.steps, "final": history[-1] if history else {}}
    return summary, {"summary": summary}

  # the exported policy supersedes the SFT checkpoints (a killed SFT resumed from them)
  return cached_phase(p["cold_start"], fingerprint, compute=compute,
                      reuse=lambda stored: stored["summary"],
                      scratch=(os.path.join(p["workdir"], SFT_DIR),),
                      reason="same data and SFT config",
                      valid=lambda stored: isinstance(stored.get("summary"), dict))


def start(c) -> parts.Start:
  """Data, retriever and the cold-start policy: where RL (and each ablation arm) starts."""
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  p = paths(c)
  setup = parts.load_data(c, p["workdir"])
  if not os.path.exists(os.path.join(p["cold_start"], "config.json")):
    raise FileNotFoundError(f"{p['cold_start']}: no cold-start policy; run the sft stage first "
                            f"(--config.stage=sft) or set r3.policy")
  mesh = parts.make_mesh(c)
  from ragjax.models.sharded import decoder_shardings
  cfg, params = load_decoder(
      p["cold_start"], dtype=c.model.dtype, param_dtype=c.model.param_dtype,
      scan_layers=c.model.scan_layers, remat=c.model.remat,
      remat_policy=c.model.get("remat_policy", "full"),
      attention_impl=c.model.get("attention_impl", ""),
      shardings=None if mesh is None else lambda cf: decoder_shardings(cf, mesh))
  return parts.Start(rl_setup(c, setup), cfg, params, load_tokenizer(p["cold_start"]), mesh)


def rl_setup(c, setup):
  """The setup RL trains on: train questions minus the cold start's (`r3.disjoint_rl`), then
  `r3.rl_questions` of them (the paper: "we sample 8,192 instances from the remaining
  HotpotQA training data"): a sample seeded by `seed` (`r3.rl_sample="random"`, in the file's
  order), or the first ones ("first": the released RL-data script's slice after the cold
  start's questions)."""
  train = setup.splits["train"]
  if c.r3.disjoint_rl and not c.r3.cold_start_files:
    path = paths(c)["data"]
    used = set()
    for name in ("trajectories.jsonl", "rejected.jsonl"):
      f = os.path.join(path, name)
      if os.path.exists(f):
        with open(f) as fh:
          used |= {str(json.loads(l)["id"]) for l in fh if l.strip()}
    train = [r for r in train if str(r["id"]) not in used]
  n = int(c.r3.rl_questions)
  if n and n < len(train) and c.r3.get("rl_sample", "first") == "random":
    import random
    keep = sorted(random.Random(f"r3-rl-questions:{c.seed}").sample(range(len(train)), n))
    train = [train[i] for i in keep]
  elif n:
    train = train[:n]
  if not train:
    raise ValueError("no RL questions left after removing the cold start's (r3.disjoint_rl)")
  return dataclasses.replace(setup, splits={**setup.splits, "train": train})


def eval_config(c):
  """R3-RAG's evaluation layout (greedy, no format retry: the code's inference has none)."""
  return protocol_variant(c, top_k=c.r3.eval_top_k, max_turns=c.r3.eval_max_turns,
                          obs_max_chars=c.r3.eval_doc_chars or None, format_retries=0)


def make_trainer(c, run, cfg, params, tok, setup, mesh=None):
  """The PPO trainer: sampling engine (the config's protocol), a greedy dev engine in the
  evaluation layout, a critic from the cold-start policy, the judge as the `judge` service;
  with `model.lora` the actor trains adapters over the cold-start policy (the critic is whole)."""
  from ragjax.rl.trainer import Trainer
  from ragjax.rl.run_config import config_fingerprint
  from ragjax.rl.selection import evaluation_data
  judge = judge_chat(c, policy=(cfg, params, tok), setup=setup, mesh=mesh)
  engine = make_engine(c, cfg, params, tok, setup.retriever, greedy=False, mesh=mesh)
  greedy = make_engine(eval_config(c), cfg, params, tok, setup.retriever, greedy=True,
                       mesh=mesh, hooks=[])
  return Trainer(model_cfg=cfg, run=run, params=params, engine=engine, eval_engine=greedy,
                 train_data=setup.splits["train"],
                 dev_data=evaluation_data(setup.splits, run.trainer.eval_split,
                                          run.trainer.eval_per_source),
                 fingerprint=config_fingerprint(c),
                 workdir=os.path.join(os.path.abspath(c.workdir), parts.RL_DIR), seed=c.seed,
                 mesh=mesh,
                 critic_params=parts.init_critic(cfg, params, head_init=run.rl.value_head_init),
                 progress=c.progress, adapter=adapter_from_config(c.model.lora),
                 services={} if judge is None else {"judge": judge})


def evaluate_policies(c, s: parts.Start, systems, splits=("dev", "test")) -> list:
  """EM results (`SystemResult`) of each (name, params, with_retrieval) in R3-RAG's evaluation
  layout: what `ragjax.ablate` compares."""
  return [r.system for r in evaluate_r3_policies(c, s, systems, splits)]


def evaluate_r3_policies(c, s: parts.Start, systems, splits) -> list:
  from ragjax.eval.r3_rag import evaluate_r3
  judge = acc_judge(c, s)
  return [evaluate_r3(name, engine, recs, split, judge=judge, batch_size=c.eval.batch_size,
                      seed=c.seed, signatures=tuple(c.rl.get("signatures", ())))
          for name, engine, recs, split in parts.system_engines(c, s, systems, splits,
                                                                engine_config=eval_config(c))]


def acc_judge(c, s: parts.Start):
  """The ChatModel behind evaluation ACC: `eval.judge` (url or checkpoint; the paper's is
  Qwen2.5-72B-Instruct), else None (ACC not computed) unless `r3.acc_judge="training"`, which
  asks the training judge (the 14B relevance judge at real sizes: a deviation to report)."""
  judged = eval_chat(c)
  if judged is not None:
    return judged[0]
  if c.r3.get("acc_judge", "training") == "training":
    return judge_chat(c, policy=(s.cfg, s.params, s.tokenizer), setup=s.setup, mesh=s.mesh)
  name = c.eval.judge.model or "an evaluation judge"
  parts.log(f"evaluation ACC: not computed (no eval.judge.url or .checkpoint for {name}; "
            f"r3.acc_judge='training' would ask the training judge instead)")
  return None


def rl_stage(c, run) -> dict:
  from ragjax.eval.r3_rag import r3_table
  p = paths(c)
  s = start(c)
  trainer = make_trainer(c, run, s.cfg, s.params, s.tokenizer, s.setup, s.mesh)
  history = trainer.train()
  params = trainer.final_params()
  trainer.ckpt.close()
  parts.export_policy(p["policy"], s.cfg, params, s.tokenizer)
  results = evaluate_r3_policies(c, s, (("R3-RAG-CS (cold start)", s.params, True),
                                        ("R3-RAG (RL)", params, True)),
                                 tuple(c.r3.eval_splits))
  table = r3_table(results)
  with open(os.path.join(p["workdir"], "results.md"), "w") as f:
    f.write("# R3-RAG: cold start vs RL (R3-RAG's evaluation layout)\n\n" + table + "\n")
  summary = {"steps": len(history), "policy": p["policy"], "table": table,
             "results": [{"system": r.system.name, "split": r.system.split,
                          "acc": None if r.acc is None else sum(r.acc) / max(len(r.acc), 1),
                          "em": sum(r.system.em) / max(len(r.system.em), 1),
                          "f1": sum(r.f1) / max(len(r.f1), 1), "judge": r.judge}
                         for r in results]}
  write_json_atomic(os.path.join(p["workdir"], "results.json"), summary)
  print(table)
  return summary


def run(c) -> dict:
  run_cfg = validate(c)
  if c.stage in ("rl", "all"):
    parts.check_resume(c)
  p = paths(c)
  os.makedirs(p["workdir"], exist_ok=True)
  out = {}
  setup = None
  if c.stage in ("data", "sft", "all"):
    setup = parts.load_data(c, p["workdir"])
  if c.stage in ("data", "all"):
    out["data"] = data_stage(c, setup)
  if c.stage in ("sft", "all"):
    out["sft"] = sft_stage(c, setup)
  if c.stage in ("rl", "all"):
    out["rl"] = rl_stage(c, run_cfg)
  return out
