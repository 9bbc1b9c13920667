"""RL of a pretrained policy on question files, with its table before and after (`c.recipe =
"qa"`; `configs/smollm2.py`: SmolLM2-135M-Instruct on HotpotQA over real Wikipedia passages).

    python -m ragjax.train --config=configs/smollm2.py

1. data (a seeded train / dev / test split, written to `<workdir>/data/{split}.jsonl` in
   FlashRAG format so the paper harness can evaluate the same questions), the retriever
   (built once under the workdir), the pretrained policy;
2. the test questions answered by the untrained policy: directly (no search; the `direct`
   protocol) and prompted with the search protocol;
3. RL (the generic trainer: resumable, keep-best on dev);
4. the test questions again with the trained policy;
5. `results.md` (EM and F1 with 95% bootstrap intervals, search rate, valid format, mean
   searches, gold-passage recall of the searches, paired differences), `summary.json`,
   PNG curves of reward and search rate over training, a trajectory viewer and wall time by
   phase; the policy as an HF directory.
Each evaluation is kept in `<workdir>/eval/` and reused by a rerun of the same config, so a
killed run resumes where it stopped.  This module only wires; every step is a package function.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ragjax.data.prepare import write_flashrag
from ragjax.eval.systems import evaluate_system, write_viewer
from ragjax.metrics import answer_metrics
from ragjax.recipes import rl
from ragjax.rl.run_config import config_fingerprint
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.rewards.builtin import search_stats
from ragjax.rollout.factory import make_engine
from ragjax.typed_config import json_safe, read_json, write_json_atomic
from ragjax.wiring import components as parts

EVAL_DIR = "eval"
DATA_DIR = "data"                # the split, as FlashRAG jsonl (for `ragjax.evaluate --suite`)
STATS = ("em", "f1", "searched", "searches", "valid_format", "answered", "gold_recall")
CURVES = ("reward", "search_r1/search_rate", "search_r1/valid_format", "searches_per_traj",
          "em", "dev/em", "response_length")


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
# tag says which weights are evaluated) and the resumable fields.
TRAINING_ONLY = ("rl.", "optim.", "critic_optim.", "trainer.", "sft.", "judge.", "model.remat",
                 "model.lora.")


def eval_fingerprint(c) -> dict:
  """The config fields an evaluation's result depends on (a cached evaluation is reused only
  when they are equal)."""
  return {k: v for k, v in config_fingerprint(c).items() if not k.startswith(TRAINING_ONLY)}


def evaluate(c, s, name, params, records, engine_config, workdir, sampler=None, weights=""):
  """One system's greedy rollouts of `records`, cached under `<workdir>/eval/` (reused when
  the config, the system, the weights' tag and the questions are the same); returns
  (per-question stats, result or None when cached, sampler)."""
  path = os.path.join(workdir, EVAL_DIR, name.replace(" ", "_").replace("/", "-") + ".json")
  key = json_safe({"config": eval_fingerprint(engine_config), "system": name,
                   "weights": weights,
                   "questions": [r.get("id", r["question"]) for r in records]})
  if os.path.exists(path):
    cached = read_json(path)
    if cached.get("key") == key:
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


def run(c) -> dict:
  t_start = time.perf_counter()
  timings = {}

  def mark(phase, t0):
    timings[phase] = round(time.perf_counter() - t0, 1)
    parts.log(f"{phase}: {timings[phase]} s")

  run_cfg = parts.validate(c)
  parts.check_resume(c)
  workdir = os.path.abspath(c.workdir)
  t0 = time.perf_counter()
  s = rl.start(c)
  for split, records in s.setup.splits.items():
    if records:
      write_flashrag(os.path.join(workdir, DATA_DIR, f"{split}.jsonl"), records)
  mark("data_index_policy", t0)
  test = s.setup.splits["test"][:c.eval.max_questions or None]
  if not test:
    raise ValueError("the qa recipe needs test questions (data.split.test or data.test_files)")

  t0 = time.perf_counter()
  base = c.model.checkpoint or "random init"
  direct, _, _ = evaluate(c, s, "untrained, direct answer", s.params, test, direct_config(c),
                          workdir, weights=base)
  prompted, _, sampler = evaluate(c, s, "untrained + search", s.params, test, c, workdir,
                                  weights=base)
  mark("evaluation_before", t0)

  t0 = time.perf_counter()
  trainer = parts.make_trainer(c, run_cfg, s.cfg, s.params, s.tokenizer, s.setup, s.mesh)
  trainer.train()
  params = trainer.final_params()
  best = trainer.ckpt.best_step() if c.trainer.keep_best else None
  weights = f"step {trainer.ckpt.latest_step()}, best {best}"
  trainer.ckpt.close()
  mark("rl", t0)

  t0 = time.perf_counter()
  trained, result, _ = evaluate(c, s, "trained + search", params, test, c, workdir, sampler,
                                weights)
  mark("evaluation_after", t0)

  t0 = time.perf_counter()
  md_table, numbers = table({"untrained, direct answer": direct,
                             "untrained + search": prompted, "trained + search": trained})
  from ragjax.report.plots import plot_curves
  metrics = MetricsLog(os.path.join(workdir, parts.RL_DIR, "metrics.jsonl")).read()
  plots = plot_curves(metrics, CURVES, os.path.join(workdir, "plots"))
  viewer = None
  if result is not None:
    viewer = write_viewer(result, test, s.tokenizer, os.path.join(workdir, "trajectories.html"),
                          limit=20)
  policy = parts.export_policy(os.path.join(workdir, parts.POLICY_DIR), s.cfg, params,
                               s.tokenizer)
  mark("outputs", t0)
  timings["total"] = round(time.perf_counter() - t_start, 1)
  md = [f"# {c.workdir}: results on {len(test)} held-out questions", "",
        "Greedy decoding; 95% bootstrap intervals over questions; the trained policy is the "
        + (f"best dev checkpoint (step {best})" if best is not None else "last step") + ".", "",
        md_table, "", "## Paired differences (same questions)", ""]
  md += [f"- {pair}: " + ", ".join(f"{k} {v}" for k, v in d.items())
         for pair, d in numbers["paired"].items()]
  md += ["", "## Wall time (s)", "", *[f"- {k}: {v}" for k, v in timings.items()]]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  print(md_table)
  summary = {"results": os.path.join(workdir, "results.md"), **numbers, "plots": plots,
             "viewer": viewer, "policy": policy, "best_step": best, "timings_s": timings,
             "test_questions": len(test)}
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  parts.log(f"done in {timings['total']} s; outputs in {workdir}")
  return summary
