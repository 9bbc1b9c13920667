"""The embedded default: learn to search in a synthetic world on one CPU machine.

`run(config)` is what `python -m ragjax.train` runs with no arguments (`configs/world.py`):
  1. generate the world (train worlds + a disjoint test world) and train its tokenizer;
  2. build the MiniLM + ScaNN index of its corpus;
  3. initialise a small policy from scratch and cold-start it with SFT on search traces
     (R3-RAG's recipe; some traces imperfect on purpose), run through the real engine;
  4. GRPO with retrieval in the loop (Search-R1's recipe), keep-best on dev;
  5. evaluate on dev and on the disjoint test world: with retrieval, without, and the
     cold-start policy, by question type, with bootstrap confidence intervals;
  6. write the table (markdown), PNG plots, a trajectory viewer page and the policy (and the
     cold-start policy) as HF directories that `python -m ragjax.evaluate` and transformers
     load.
This module only wires; every step is a package function.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Optional, Sequence

import jax

from ragjax.data.world import ENTITY_QTYPES, QTYPES
from ragjax.data.world_traces import AnswerSwapRetriever, TraceShares, make_scripts, swap_answers
from ragjax.eval.systems import SystemResult, results_table, write_viewer
from ragjax.wiring import components as parts
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.sft import SFTConfig, run_sft
from ragjax.rollout.factory import make_engine
from ragjax.rl.teacher_traces import teacher_traces
from ragjax.typed_config import flatten, from_dict, json_safe, write_json_atomic

COLD_START_DIR = "cold_start_policy"   # under the workdir, beside policy/
COLD_START_META = "ragjax_cold_start.json"
# The sections the cold start depends on: a cached cold start is reused only when all match.
COLD_START_SECTIONS = ("seed", "world", "tokenizer", "model", "protocol", "sampler", "rollout",
                       "retriever", "sft", "traces")


def scripted_traces(c, engine, records, passages=None, *, swap: bool = True):
  """Teacher-forced search traces of `records` through the real engine (tokens, labels);
  `traces.swap_answer_rate` of them with counterfactual answers unless `swap` is False;
  `passages` ({id: text}) for `traces.quote`."""
  settings = ("chunk", "refine", "quote", "swap_answer_rate")
  shares = from_dict(TraceShares, {k: v for k, v in c.traces.items() if k not in settings},
                     "traces")
  rate = c.traces.get("swap_answer_rate", 0.0) if swap else 0.0
  records = swap_answers(records, rate, c.seed)
  scripts = make_scripts(records, c.seed, shares, refine=c.traces.get("refine", False),
                         quote=c.traces.get("quote", False), passages=passages)
  return teacher_traces(engine, records, scripts, max_new_tokens=c.sampler.max_new_tokens,
                        cache_length=c.sampler.max_cache_length, chunk=c.traces.chunk,
                        seed=c.seed,
                        retriever=AnswerSwapRetriever(engine.retriever) if rate else None)


def passage_texts(setup) -> dict:
  """{passage id: text} of the world (what `traces.quote` quotes)."""
  return {p["id"]: p["text"] for p in setup.world.passages}


@dataclasses.dataclass
class Start(parts.Start):
  """The world's start: the policy after the cold start, plus what the outputs need."""
  sft_history: list = dataclasses.field(default_factory=list)
  train_traces: tuple = ((), ())  # (tokens, labels) of scripted train traces (for the probe)
  template: object = None         # a greedy engine over the initial policy (traces, probe)


SFT_DIR = "sft"        # the cold start's SFT checkpoints (a killed SFT resumes from them)


def start_fingerprint(c) -> dict:
  """The config fields the cold start depends on (the traces are teacher-forced, so sampling
  settings and rollout hooks do not matter)."""
  skip = ("sampler.temperature", "sampler.top_p", "rollout.hooks", "rollout.spare_rows",
          "sft.save_every", "sft.log_every")
  return {k: v for k, v in flatten(c).items()
          if k.split(".")[0] in COLD_START_SECTIONS and not k.startswith(skip)}


def start(c, timings: Optional[dict] = None) -> Start:
  """World + tokenizer + index, then the cold start (SFT on scripted traces), reused from
  `<workdir>/cold_start_policy` when it was trained under the same cold-start sections."""
  timings = {} if timings is None else timings
  workdir = os.path.abspath(c.workdir)
  os.makedirs(workdir, exist_ok=True)

  def mark(name, t0):
    timings[name] = round(time.perf_counter() - t0, 1)
    parts.log(f"{name}: {timings[name]} s")

  t0 = time.perf_counter()
  setup = parts.load_data(c, workdir, retriever=False)
  mark("world_and_tokenizer", t0)
  tok = setup.tokenizer
  parts.log(f"world: {len(setup.world.passages)} passages, "
            f"{ {s: len(q) for s, q in setup.splits.items()} } questions, vocab {len(tok)}")
  t0 = time.perf_counter()
  setup.retriever = parts.open_retriever(c, workdir, setup.corpus_path)
  mark("index", t0)

  mesh = parts.make_mesh(c)
  cfg, params, tok = parts.load_policy(c, tok, mesh)
  n_params = sum(int(x.size) for x in jax.tree.leaves(params))
  parts.log(f"policy: {n_params / 1e6:.2f}M params from scratch")
  template = make_engine(c, cfg, params, tok, setup.retriever, greedy=True, hooks=[])
  cache = os.path.join(workdir, COLD_START_DIR)
  meta_path = os.path.join(cache, COLD_START_META)
  fingerprint = start_fingerprint(c)
  if parts.reusable_cold_start(cache, meta_path, json_safe(fingerprint)) is not None:
    from ragjax.models.hf_io import load_decoder
    _, sft_params = load_decoder(cache)
    sft_hist = MetricsLog(os.path.join(workdir, "sft_metrics.jsonl")).read()
    traces = scripted_traces(c, template, setup.splits["train"][:max(c.probe.traces, 0)],
                             passage_texts(setup), swap=False)
    parts.log(f"cold start: reusing {cache} (same cold-start config)")
    return Start(setup, cfg, sft_params, tok, mesh, sft_hist, traces, template)

  t0 = time.perf_counter()
  rows_t, rows_l = scripted_traces(c, template, setup.splits["train"], passage_texts(setup))
  mark("sft_traces", t0)
  t0 = time.perf_counter()
  sft_params, sft_hist = run_sft(cfg, params, rows_t, rows_l, from_dict(SFTConfig, c.sft, "sft"),
                                 c.rollout.widths, seed=c.seed, mesh=mesh,
                                 log_path=os.path.join(workdir, "sft_metrics.jsonl"),
                                 progress=c.progress, ckpt_dir=os.path.join(workdir, SFT_DIR),
                                 fingerprint=fingerprint)
  mark("sft", t0)
  parts.export_policy(cache, cfg, sft_params, tok)
  write_json_atomic(meta_path, {"fingerprint": json_safe(fingerprint)})
  shutil.rmtree(os.path.join(workdir, SFT_DIR), ignore_errors=True)   # the exported policy supersedes them
  probe_traces = (scripted_traces(c, template, setup.splits["train"][:max(c.probe.traces, 0)],
                                  passage_texts(setup), swap=False)
                  if c.traces.get("swap_answer_rate", 0.0) else (rows_t, rows_l))
  return Start(setup, cfg, sft_params, tok, mesh, sft_hist, probe_traces, template)


def run(c) -> dict:
  t_start = time.perf_counter()
  run_cfg = parts.validate(c)
  if jax.process_count() > 1:
    raise ValueError("the embedded default runs on one process (one CPU machine); multi-host "
                     "training is for the method recipes (e.g. configs/search_r1.py)")
  parts.check_resume(c)
  workdir = os.path.abspath(c.workdir)
  timings = {}
  s = start(c, timings)

  t0 = time.perf_counter()
  trainer = parts.make_trainer(c, run_cfg, s.cfg, s.params, s.tokenizer, s.setup, s.mesh)
  trainer.train()
  rl_params = trainer.final_params()
  if c.trainer.keep_best and trainer.ckpt.best_step() is not None:
    parts.log(f"GRPO: keeping the best dev checkpoint (step {trainer.ckpt.best_step()})")
  trainer.ckpt.close()
  timings["grpo"] = round(time.perf_counter() - t0, 1)
  parts.log(f"grpo: {timings['grpo']} s")

  t0 = time.perf_counter()
  results = parts.evaluate_policies(c, s, (("grpo + retrieval", rl_params, True),
                                     ("grpo, no retrieval", rl_params, False),
                                     ("cold-start (sft) + retrieval", s.params, True)))
  timings["evaluation"] = round(time.perf_counter() - t0, 1)
  parts.log(f"evaluation: {timings['evaluation']} s")
  t0 = time.perf_counter()
  probe = copy_probe(c, s, {"cold start": s.params, "grpo": rl_params})
  timings["probe"] = round(time.perf_counter() - t0, 1)
  parts.log(f"probe: {timings['probe']} s")
  summary = write_outputs(c, workdir, s.cfg, rl_params, s.tokenizer, results,
                          s.setup.splits["test"], s.sft_history, timings, probe)
  timings["total"] = round(time.perf_counter() - t_start, 1)
  summary["timings_s"] = timings
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  parts.log(f"done in {timings['total']} s; outputs in {workdir}")
  return summary


def copy_probe(c, s: Start, policies: dict) -> dict:
  """Teacher-forced NLL of the policy tokens on train-world vs test-world traces, by region and
  name/word (see `ragjax.eval.trace_nll`): {"<policy> <split>": {(region, kind): (n, nll)}}."""
  from ragjax.eval.trace_nll import trace_nll
  n = c.probe.traces
  if n <= 0:
    return {}
  test_t, test_l = scripted_traces(c, s.template, s.setup.splits["test"][:n],
                                   passage_texts(s.setup), swap=False)
  train_t, train_l = s.train_traces
  out = {}
  for name, params in policies.items():
    out[f"{name} train"] = trace_nll(s.cfg, params, s.tokenizer, train_t[:n], train_l[:n])
    out[f"{name} test"] = trace_nll(s.cfg, params, s.tokenizer, test_t, test_l)
  return out


def headline(results: Sequence[SystemResult]) -> dict:
  """The claims the README makes, each with a bootstrap interval, on the test world."""
  from ragjax.report.bootstrap import bootstrap_diff, bootstrap_mean
  by = {(r.split, r.name): r for r in results}
  rl = by[("test", "grpo + retrieval")]
  no = by[("test", "grpo, no retrieval")]
  sft = by[("test", "cold-start (sft) + retrieval")]
  multi = [e for e, q in zip(rl.em, rl.qtypes) if q == "2hop"]
  em_rl, em_no = bootstrap_mean(rl.em), bootstrap_mean(no.em)
  entity = lambda r: [e for e, q in zip(r.em, r.qtypes) if q in ENTITY_QTYPES]
  ent_rl, ent_no = bootstrap_mean(entity(rl)), bootstrap_mean(entity(no))
  return {
      "test_entity_em_with_retrieval": str(ent_rl),
      "test_entity_em_without_retrieval": str(ent_no),
      "test_em_with_retrieval": str(em_rl),
      "test_em_without_retrieval": str(em_no),
      # None (null in summary.json, which stays strict JSON) when no-retrieval EM is 0
      "retrieval_ratio": round(em_rl.mean / em_no.mean, 2) if em_no.mean > 0 else None,
      "test_em_cold_start": str(bootstrap_mean(sft.em)),
      "grpo_minus_cold_start": str(bootstrap_diff(rl.em, sft.em)),
      "test_em_multi_hop": str(bootstrap_mean(multi)),
  }


def write_outputs(c, workdir, cfg, params, tok, results, test, sft_hist, timings,
                  probe: Optional[dict] = None) -> dict:
  from ragjax.report.plots import plot_curves
  table, _ = results_table(results, QTYPES, {"entity": ENTITY_QTYPES})
  head = headline(results)
  md = ["# ragjax embedded default: results", "",
        "Exact match with 95% bootstrap intervals; the test world's entities never appear in "
        "training.", "", table, "", "## Headline (test world)", ""]
  md += [f"- {k}: {v}" for k, v in head.items()]
  if probe:
    from ragjax.eval.trace_nll import nll_table
    md += ["", "## Copy or memorise? (teacher-forced NLL of the policy's tokens)", "",
           "Same kind of scripted trace from a training world and from the test world: a policy "
           "that copies names scores both alike; one that memorised its training names does "
           "much worse on the test world's name pieces.", "", nll_table(probe)]
  md += ["", "## Time (s)", "", *[f"- {k}: {v}" for k, v in timings.items()]]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  print(table)
  print("\n".join(f"{k}: {v}" for k, v in head.items()))
  metrics = MetricsLog(os.path.join(workdir, parts.RL_DIR, "metrics.jsonl")).read()
  plots = plot_curves(metrics, ("reward", "em", "searches_per_traj", "response_length", "dev/em"),
                      os.path.join(workdir, "plots"))
  plots += plot_curves(sft_hist, ("loss",), os.path.join(workdir, "plots", "sft"))
  rl_test = next(r for r in results if r.split == "test" and r.name == "grpo + retrieval")
  viewer = write_viewer(rl_test, test, tok, os.path.join(workdir, "trajectories.html"))
  policy_dir = parts.export_policy(os.path.join(workdir, parts.POLICY_DIR), cfg, params, tok)
  return {"table_markdown": os.path.join(workdir, "results.md"), "plots": plots,
          "viewer": viewer, "policy": policy_dir,
          "cold_start_policy": os.path.join(workdir, COLD_START_DIR), "headline": head,
          "copy_probe": {name: {f"{r}/{k}": v for (r, k), v in res.items()}
                         for name, res in (probe or {}).items()}}
