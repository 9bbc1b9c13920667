"""RL of a pretrained policy on question files, with its table before and after (`c.recipe =
"qa"`; `configs/smollm2.py`: SmolLM2-135M-Instruct on HotpotQA over real Wikipedia passages).

    python -m ragjax.train --config=configs/smollm2.py

1. data (a seeded train / dev / test split, written to `<workdir>/data/{split}.jsonl` in
   FlashRAG format so the paper harness can evaluate the same questions), the retriever
   (built once under the workdir), the pretrained policy;
2. (unless `eval.baselines=False`) the test questions answered by the untrained policy:
   directly (no search; the `direct` protocol) and prompted with the search protocol;
3. with `sft.steps` > 0, a cold start: SFT (through `model.lora`'s adapters, then merged) on
   scripted search traces of `traces.questions` training questions in the protocol's grammar
   (`ragjax.rl.search_traces`: the question as the query, the retrieved passages, the gold
   answer, and for AutoRefine's protocol a `<refine>` block with the passages' sentence that
   holds it; kept only where the passages hold it), cached in `<workdir>/cold_start_policy`,
   and the test questions answered by it (unless `eval.test_rows=False`: the comparison
   command's runs, whose policies it evaluates itself, skip this and step 5);
4. RL from there (the generic trainer: resumable, keep-best on dev; fresh adapters on the
   cold-started weights, which are also the KL reference);
5. the test questions again with the trained policy;
6. `results.md` (EM and F1 with 95% bootstrap intervals, search rate, valid format, mean
   searches, gold-passage recall of the searches, paired differences), `summary.json`,
   PNG curves of reward and search rate over training, a trajectory viewer and wall time by
   phase; the policy as an HF directory and, for a Llama policy, as `policy.gguf` (float16,
   the source GGUF's tokenizer) for llama.cpp and Ollama.
Each evaluation is kept in `<workdir>/eval/` and reused by a rerun of the same config, so a
killed run resumes where it stopped.  This module only wires; every step is a package function.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

import numpy as np

from ragjax.data.prepare import write_flashrag
from ragjax.eval.systems import evaluate_system, write_viewer
from ragjax.metrics import answer_metrics
from ragjax.models.lora import adapter_from_config
from ragjax.recipes import rl
from ragjax.report.table import step_table
from ragjax.recipes.cached_phase import COLD_START_DIR, cached_phase, config_fields
from ragjax.rl.run_config import ADDED_FIELDS, config_fingerprint
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.rewards.builtin import search_stats
from ragjax.rl.question_pool import pool_config, question_pool
from ragjax.rl.search_traces import grammar, search_traces
from ragjax.rl.sft import SFTConfig, run_sft
from ragjax.rollout.factory import make_engine
from ragjax.typed_config import from_dict, json_safe, write_json_atomic
from ragjax.wiring import components as parts

EVAL_DIR = "eval"
DATA_DIR = "data"                # the split, as FlashRAG jsonl (for `ragjax.evaluate --suite`)
POLICY_GGUF = "policy.gguf"     # the trained policy for llama.cpp / Ollama (float16)
SFT_DIR = "sft"                  # the cold start's SFT checkpoints (a killed SFT resumes)
# The config sections a cold start depends on (a cached one is reused only when they match).
COLD_START_SECTIONS = ("seed", "data", "model", "protocol", "sampler", "rollout", "retriever",
                       "sft", "traces")
STATS = ("em", "f1", "searched", "searches", "valid_format", "answered", "gold_recall")
CURVES = ("reward", "search_r1/search_rate", "search_r1/valid_format", "searches_per_traj",
          "em", "dev/em", "response_length", "generated/reward", "generated/em",
          "filter/kept_groups", "grad_norm",
          # each method's signature, where its config logs it (configs/<method>.py:smollm2)
          "autorefine/refine_success", "autorefine/search_success", "reward/rezero_retry",
          "reward/rezero_correctness", "reward/search_retry", "rex_rag/clones_made",
          "rex_rag/clones_kept")
# results.md's per-step table: (header, metrics.jsonl key)
STEP_COLUMNS = (("reward (trained rows)", "reward"), ("rollout reward", "generated/reward"),
                ("rollout EM", "generated/em"), ("kept groups", "filter/kept_groups"),
                ("of groups", "filter/groups"), ("search rate", "search_r1/search_rate"),
                ("valid format", "search_r1/valid_format"), ("grad norm", "grad_norm"),
                ("dev EM", "dev/em"), ("seconds", "time/step_s"))


def direct_config(c):
  """The config with the `direct` protocol (the no-search baseline), same sampler."""
  d = c.copy_and_resolve_references()
  fields = {k: v for k, v in c.protocol.items() if k in ("top_k", "obs_max_tokens",
                                                         "demonstration", "example_answer")}
  with d.unlocked():
    d.protocol = type(c.protocol)(dict(name="direct", max_turns=0, **fields))
  return d


def per_question(result, records) -> dict:
  """{stat: [value per question]} of one evaluated system (gold_recall: None where the
  question names no supporting passage)."""
  rows = [row for batch in result.batch for row in batch.rows][:len(records)]
  out = {k: [] for k in STATS}
  for row, rec in zip(rows, records):
    m = answer_metrics(row.answer, rec["golden_answers"])
    s = search_stats(row, rec)
    for k in STATS:
      out[k].append(m[k] if k in m else s[k])
  return out


# Config fields that never change a greedy evaluation: how the policy is trained (the weights'
# tag says which weights are evaluated), which training questions it sees, how the training
# rollouts sample (greedy decoding reads no temperature, nucleus or top-k), and the training
# rollouts' hooks (an evaluation runs none: REX-RAG's probe clones, `rex_rag.*`, and the spare
# rows kept for them), so a method that shares a cold start shares its evaluation too.
TRAINING_ONLY = ("rl.", "optim.", "critic_optim.", "trainer.", "sft.", "traces.", "judge.",
                 "pool.", "model.remat", "model.lora.", "sampler.temperature",
                 "sampler.temperatures", "sampler.top_p", "sampler.top_k",
                 "sampler.nucleus_candidates", "rollout.hooks", "rollout.spare_rows",
                 "rex_rag.")


def eval_fingerprint(c) -> dict:
  """The config fields an evaluation's result depends on (a cached evaluation is reused only
  when they are equal)."""
  return {k: v for k, v in config_fingerprint(c).items() if not k.startswith(TRAINING_ONLY)}


def cold_start_adapter(c):
  """The cold start's LoRA adapters: `model.lora` on every layer (`model.lora.layers` limits
  RL's adapters only; the cold start fits all of them, as it did before that field existed)."""
  section = dict(c.model.lora.to_dict() if hasattr(c.model.lora, "to_dict") else c.model.lora)
  section["layers"] = 0
  return adapter_from_config(section)


def cold_start_fingerprint(c) -> dict:
  """The config fields the cold start depends on (its traces are teacher-forced, so the
  sampling settings do not matter; `model.lora.layers` and `.forward` are RL's)."""
  fields = config_fields(c, sections=COLD_START_SECTIONS,
                         skip=("sampler.temperature", "sampler.top_p", "rollout.hooks",
                               "rollout.spare_rows", "sft.save_every", "sft.log_every",
                               "model.lora.layers", "model.lora.forward"))
  return {k: v for k, v in fields.items()
          if not (k in ADDED_FIELDS and v == ADDED_FIELDS[k])}


def traces_options(c) -> dict:
  """`search_traces`'s scripting options from the config's `traces` section (defaults when
  the section predates them)."""
  return {"answer_think": c.traces.get("answer_think", ADDED_FIELDS["traces.answer_think"]),
          "second_search": bool(c.traces.get("second_search",
                                             ADDED_FIELDS["traces.second_search"]))}


def cold_start(c, s, workdir) -> tuple:
  """(params, SFT metrics, weights tag): SFT of the loaded policy on scripted search traces of
  the training questions (module docstring, step 3), or the policy reused from
  `<workdir>/cold_start_policy` when it was trained under the same cold-start fields."""
  fingerprint = json_safe(cold_start_fingerprint(c))
  tag = "cold start " + hashlib.sha256(
      json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
  cache = os.path.join(workdir, COLD_START_DIR)
  log_path = os.path.join(workdir, "sft_metrics.jsonl")

  def reuse(_):
    cached = c.copy_and_resolve_references()
    with cached.unlocked():
      cached.model.checkpoint = cache
    _, params, _ = parts.load_policy(cached, mesh=s.mesh)
    return params, MetricsLog(log_path).read()

  def compute():
    records = s.setup.splits["train"][:c.traces.questions]
    template = make_engine(c, s.cfg, s.params, s.tokenizer, s.setup.retriever, greedy=True,
                           hooks=[])
    rows_t, rows_l, stats = search_traces(
        template, records, max_new_tokens=c.sampler.max_new_tokens,
        cache_length=c.sampler.max_cache_length, require_retrieved=c.traces.require_retrieved,
        seed=c.seed, **traces_options(c))
    second = (f"; {stats['second_search']} given a second search, {stats['two_searches']} of "
              "the kept search twice" if "second_search" in stats else "")
    parts.log(f"cold start: {stats['kept']} traces kept of {stats['questions']} training "
              f"questions ({stats['retrieved']} with a gold answer in the passages, "
              f"{stats['too_long']} with a turn over sampler.max_new_tokens{second})")
    if not rows_t:
      raise ValueError("the cold start kept no trace: raise traces.questions or set "
                       "traces.require_retrieved=False")
    params, history = run_sft(s.cfg, s.params, rows_t, rows_l,
                              from_dict(SFTConfig, c.sft, "sft"), c.rollout.widths,
                              seed=c.seed, mesh=s.mesh, log_path=log_path,
                              progress=c.progress, ckpt_dir=os.path.join(workdir, SFT_DIR),
                              fingerprint=fingerprint,
                              adapter=cold_start_adapter(c))
    parts.export_policy(cache, s.cfg, params, s.tokenizer)
    return (params, history), {"traces": stats}

  params, history = cached_phase(cache, fingerprint, compute=compute, reuse=reuse,
                                 scratch=(os.path.join(workdir, SFT_DIR),))
  return params, history, tag


def rl_questions(c, s, params, workdir) -> list:
  """The training questions RL draws from (`pool.*`, `ragjax.rl.question_pool`), written to
  `<workdir>/data/rl_pool.jsonl`; the whole training split when the config has no `pool`."""
  pool = pool_config(c.get("pool"))
  train = s.setup.splits["train"]
  if pool == pool_config(None):
    return train
  greedy = make_engine(c, s.cfg, params, s.tokenizer, s.setup.retriever, greedy=True, hooks=[])
  sampling = (make_engine(c, s.cfg, params, s.tokenizer, s.setup.retriever, greedy=False,
                          hooks=[]) if pool.pass_k else None)
  exclude = c.traces.questions if c.sft.steps and "traces" in c else 0
  records, stats = question_pool(greedy, train, pool, exclude=exclude,
                                 max_new_tokens=c.sampler.max_new_tokens,
                                 cache_length=c.sampler.max_cache_length, seed=c.seed,
                                 sampler_engine=sampling)
  parts.log("RL questions: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
  if not records:
    raise ValueError(f"the RL question pool is empty ({stats}): loosen pool.* or raise "
                     f"data.split's training share")
  write_flashrag(os.path.join(workdir, DATA_DIR, "rl_pool.jsonl"), records)
  return records


def evaluate(c, s, name, params, records, engine_config, workdir, sampler=None, weights=""):
  """One system's greedy rollouts of `records`, cached under `<workdir>/eval/` (reused when
  the config, the system, the weights' tag and the questions are the same); returns
  (per-question stats, result or None when cached, sampler)."""
  path = os.path.join(workdir, EVAL_DIR, name.replace(" ", "_").replace("/", "-") + ".json")
  key = json_safe({"config": eval_fingerprint(engine_config), "system": name,
                   "weights": weights,
                   "questions": [r.get("id", r["question"]) for r in records]})
  cached = parts.read_cache(path, lambda d: "key" in d and valid_stats(d.get("stats"),
                                                                        len(records)))
  if cached is not None and cached["key"] == key:
    parts.log(f"{name}: reusing {path}")
    return cached["stats"], None, sampler
  engine = make_engine(engine_config, s.cfg, params, s.tokenizer, s.setup.retriever,
                       greedy=True, hooks=[], evaluation=True, sampler=sampler)
  t0 = time.perf_counter()
  result = evaluate_system(name, engine, records, "test", batch_size=c.eval.batch_size,
                           seed=c.seed)
  stats = per_question(result, records)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  write_json_atomic(path, {"key": key, "stats": stats, "seconds": time.perf_counter() - t0,
                           "responses": result.responses})
  parts.log(f"{name}: EM {np.mean(stats['em']):.3f} on {len(records)} questions "
            f"({time.perf_counter() - t0:.0f} s)")
  return stats, result, engine.sampler


def valid_stats(stats, n: int) -> bool:
  """A cached evaluation's stats: each of STATS a list of one number (or None) per question."""
  return isinstance(stats, dict) and all(
      isinstance(stats.get(k), list) and len(stats[k]) == n
      and all(v is None or isinstance(v, (int, float)) for v in stats[k]) for k in STATS)


def table(systems: dict) -> tuple[str, dict]:
  """Markdown rows (one per system) and the paired differences of the last system against
  each other one."""
  from ragjax.report.bootstrap import bootstrap_diff, bootstrap_mean
  head = ["system", "EM", "F1", "search rate", "valid format", "answered", "searches/q",
          "gold recall of searches"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  numbers = {}
  for name, st in systems.items():
    recall = [x for x in st["gold_recall"] if x is not None]
    est = {k: bootstrap_mean(st[k]) for k in ("em", "f1", "searched", "valid_format",
                                              "answered")}
    est["gold_recall"] = bootstrap_mean(recall)
    numbers[name] = {k: str(v) for k, v in est.items()}
    numbers[name]["searches"] = float(np.mean(st["searches"]))
    lines.append("| " + " | ".join([name, str(est["em"]), str(est["f1"]), str(est["searched"]),
                                    str(est["valid_format"]), str(est["answered"]),
                                    f"{np.mean(st['searches']):.2f}",
                                    str(est["gold_recall"])]) + " |")
  names = list(systems)
  last = names[-1]
  diffs = {}
  for other in names[:-1]:
    diffs[f"{last} - {other}"] = {
        k: str(bootstrap_diff(systems[last][k], systems[other][k]))
        for k in ("em", "f1", "searched", "valid_format")}
  return "\n".join(lines), {"systems": numbers, "paired": diffs}


def check_inputs(c) -> None:
  """What this recipe alone reads, checked with the config (before any model or index): test
  questions to answer, a policy checkpoint (question files bring no tokenizer) and, with a
  cold start, `traces.questions` >= 1 and a protocol whose traces it can script."""
  if c.data.source == "files" and not parts.question_splits(c)["test"]:
    raise ValueError("the qa recipe needs test questions (data.split.test or data.test_files)")
  q = c.traces.get("questions") if "traces" in c else None
  if c.sft.steps and (isinstance(q, bool) or not isinstance(q, int) or q < 1):
    raise ValueError(f"traces.questions must be an integer >= 1 (the training questions "
                     f"scripted for the cold start; sft.steps=0: no cold start), got {q!r}")
  if c.sft.steps:
    grammar(c.protocol.name)
  if c.data.source == "files" and not c.model.checkpoint:
    raise ValueError("model.checkpoint is empty and question files bring no tokenizer; set "
                     "model.checkpoint to an HF directory or a .gguf file")


def run(c) -> dict:
  t_start = time.perf_counter()
  timings = {}

  def mark(phase, t0):
    timings[phase] = round(time.perf_counter() - t0, 1)
    parts.log(f"{phase}: {timings[phase]} s")

  run_cfg = parts.validate(c)
  check_inputs(c)
  pool_config(c.get("pool"))          # pool.* fails here, before any work
  parts.check_resume(c)
  workdir = os.path.abspath(c.workdir)
  t0 = time.perf_counter()
  s = rl.start(c, world_cold_start=False)
  for split, records in s.setup.splits.items():
    if records:
      write_flashrag(os.path.join(workdir, DATA_DIR, f"{split}.jsonl"), records)
  mark("data_index_policy", t0)
  test = s.setup.splits["test"][:c.eval.max_questions or None]
  if not test:
    raise ValueError("the qa recipe needs test questions (data.split.test or data.test_files)")

  t0 = time.perf_counter()
  base = c.model.checkpoint or "random init"
  systems, sampler = {}, None
  if c.eval.baselines:     # False: only the cold start's and the trained policy's rows
    systems["untrained, direct answer"], _, _ = evaluate(
        c, s, "untrained, direct answer", s.params, test, direct_config(c), workdir,
        weights=base)
    systems["untrained + search"], _, sampler = evaluate(
        c, s, "untrained + search", s.params, test, c, workdir, weights=base)
    mark("evaluation_before", t0)
  start_params, sft_history, start_tag = s.params, [], base
  if c.sft.steps:
    t0 = time.perf_counter()
    start_params, sft_history, start_tag = cold_start(c, s, workdir)
    mark("cold_start", t0)
    if c.eval.test_rows:
      t0 = time.perf_counter()
      systems["cold start + search"], _, sampler = evaluate(
          c, s, "cold start + search", start_params, test, c, workdir, sampler, start_tag)
      mark("evaluation_cold_start", t0)

  t0 = time.perf_counter()
  setup = dataclasses.replace(s.setup, splits={**s.setup.splits,
                                               "train": rl_questions(c, s, start_params, workdir)})
  mark("rl_questions", t0)
  t0 = time.perf_counter()
  trainer = parts.make_trainer(c, run_cfg, s.cfg, start_params, s.tokenizer, setup, s.mesh)
  trainer.train()
  params = trainer.final_params()
  best = trainer.ckpt.best_step() if c.trainer.keep_best else None
  weights = f"{start_tag}; step {trainer.ckpt.latest_step()}, best {best}"
  trainer.ckpt.close()
  mark("rl", t0)

  result = None
  if c.eval.test_rows:
    t0 = time.perf_counter()
    systems["trained + search"], result, _ = evaluate(c, s, "trained + search", params, test, c,
                                                      workdir, sampler, weights)
    mark("evaluation_after", t0)

  t0 = time.perf_counter()
  md_table, numbers = table(systems) if systems else (
      "(no test rows: eval.test_rows=False)", {"systems": {}, "paired": {}})
  from ragjax.report.plots import plot_curves
  metrics = MetricsLog(os.path.join(workdir, parts.RL_DIR, "metrics.jsonl")).read()
  plots = plot_curves(metrics, CURVES, os.path.join(workdir, "plots"))
  plots += plot_curves(sft_history, ("loss",), os.path.join(workdir, "plots", "sft"))
  viewer = None
  if result is not None:
    viewer = write_viewer(result, test, s.tokenizer, os.path.join(workdir, "trajectories.html"),
                          limit=20)
  policy = parts.export_policy(os.path.join(workdir, parts.POLICY_DIR), s.cfg, params,
                               s.tokenizer)
  policy_gguf = parts.export_policy_gguf(os.path.join(workdir, POLICY_GGUF), s.cfg, params,
                                         s.tokenizer, c.model.checkpoint)
  mark("outputs", t0)
  timings["total"] = round(time.perf_counter() - t_start, 1)
  md = [f"# {c.workdir}: results on {len(test)} held-out questions", "",
        "Greedy decoding; 95% bootstrap intervals over questions; the trained policy is the "
        + (f"best dev checkpoint (step {best})" if best is not None else "last step") + ".", "",
        md_table, "", "## Paired differences (same questions)", ""]
  md += [f"- {pair}: " + ", ".join(f"{k} {v}" for k, v in d.items())
         for pair, d in numbers["paired"].items()]
  md += ["", "## Wall time (s)", "", *[f"- {k}: {v}" for k, v in timings.items()]]
  md += ["", "## Per RL step (`rl/metrics.jsonl`)", "", step_table(metrics, STEP_COLUMNS)]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  print(md_table)
  summary = {"results": os.path.join(workdir, "results.md"), **numbers, "plots": plots,
             "viewer": viewer, "policy": policy, "policy_gguf": policy_gguf, "best_step": best,
             "timings_s": timings, "test_questions": len(test)}
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  parts.log(f"done in {timings['total']} s; outputs in {workdir}")
  return summary
