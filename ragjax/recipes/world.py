"""The embedded default: learn to search in a synthetic world on one CPU machine.

`run(config)` is what `python -m ragjax.train` runs with no arguments (config:
`configs/world.py`):
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
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional, Sequence

import jax
import numpy as np

from ragjax.data.world import QTYPES, World, WorldConfig, generate_world, write_flashrag
from ragjax.models.config import DecoderConfig
from ragjax.models.decoder import init_params
from ragjax.recipes.world_traces import make_scripts
from ragjax.rl.config import OptimConfig, RLConfig, RunConfig, TrainerConfig, from_dict
from ragjax.rl.engine_rollout import EngineRollout, as_record, pad_to_width, pick_width
from ragjax.rl.trainer import Trainer, answer_metrics
from ragjax.rollout.engine import EngineConfig, RolloutEngine
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols import get_protocol
from ragjax.rollout.teacher import TeacherPolicy
from ragjax.sampling.config import SamplerConfig
from ragjax.sampling.sampler import Sampler


COLD_START_DIR = "cold_start_policy"   # under the workdir, beside policy/


def log(msg: str) -> None:
  print(f"[ragjax {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class NullRetriever:
  """Retrieval disabled: every search returns no documents (the 'without retrieval' system)."""

  def search(self, queries, k):
    return [[] for _ in queries]


# --- 1-2: world, tokenizer, index -------------------------------------------------------------
def world_config(c) -> WorldConfig:
  return from_dict(WorldConfig, c.world)


def prepare_world(c, workdir: str):
  from ragjax.data.tokenizer import train_world_tokenizer
  from transformers import AutoTokenizer
  wcfg = world_config(c)
  world = generate_world(wcfg)
  paths = write_flashrag(world, os.path.join(workdir, "world"))
  tok_dir = os.path.join(workdir, "tokenizer")
  train_world_tokenizer(tok_dir, wcfg, vocab_size=c.tokenizer.vocab_size, world=world,
                        syllables=c.tokenizer.syllables, digit_pairs=c.tokenizer.digit_pairs)
  tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
  return world, paths, tok


def build_retriever(c, corpus_path: str, workdir: str):
  from ragjax.retrieval import open_index
  from ragjax.retrieval.index import EncoderSpec, build_index
  index_dir = os.path.join(workdir, "index")
  spec = EncoderSpec(model_dir=c.retrieval.encoder_dir or None)
  if not os.path.exists(os.path.join(index_dir, "index.json")):
    build_index(corpus_path, index_dir, backend=c.retrieval.backend, encoder_spec=spec,
                progress=c.progress)
  return open_index(index_dir, cache_size=c.retrieval.cache_size)


# --- 3: policy, sampler, engine ---------------------------------------------------------------
def policy_config(c, tok) -> DecoderConfig:
  m = c.model
  return DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=m.hidden_size,
                       intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       rope_theta=m.rope_theta, tie_word_embeddings=True,
                       max_position_embeddings=c.sampler.max_cache_length,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id)


def make_engine(c, cfg: DecoderConfig, params, tok, retriever, *, greedy: bool) -> RolloutEngine:
  protocol = get_protocol(c.protocol.name, top_k=c.protocol.top_k, max_turns=c.protocol.max_turns,
                          obs_max_tokens=c.protocol.obs_max_tokens)
  scfg = SamplerConfig(max_cache_length=c.sampler.max_cache_length,
                       max_new_tokens=c.sampler.max_new_tokens,
                       prompt_buckets=tuple(c.sampler.prompt_buckets),
                       extend_buckets=tuple(c.sampler.extend_buckets),
                       temperature=c.sampler.temperature, greedy=greedy,
                       stop_strings=protocol.stop_sequences, eos_ids=(tok.eos_token_id,))
  sampler = Sampler(cfg, params, tok, scfg)
  return RolloutEngine(protocol, sampler, retriever, tok,
                       EngineConfig(chat=False, max_response_tokens=c.rollout.max_response_tokens,
                                    pad_id=tok.pad_token_id))


# --- 3: cold-start SFT ------------------------------------------------------------------------
def sft_trajectories(c, examples, tok, retriever, engine_template: RolloutEngine):
  """Teacher-forced traces through the real engine: tokens and labels, one row per example."""
  scripts = make_scripts(examples, c.seed, c.sft.wasted_query_rate)
  rows_t, rows_l = [], []
  chunk = c.sft.trace_chunk
  for s in range(0, len(examples), chunk):
    exs, sc = examples[s:s + chunk], scripts[s:s + chunk]
    teacher = TeacherPolicy(tok, sc, stop_strings=engine_template.protocol.stop_sequences,
                            eos_ids=(tok.eos_token_id,), max_new_tokens=c.sampler.max_new_tokens,
                            cache_length=c.sampler.max_cache_length)
    engine = RolloutEngine(engine_template.protocol, teacher, retriever, tok,
                           engine_template.config)
    batch = engine.run([e.question for e in exs], samples_per_prompt=1, seed=c.seed)
    t = batch.traj
    for i in range(t.num_rows):
      n = int(t.lengths[i])
      rows_t.append(np.asarray(t.tokens)[i, :n])
      rows_l.append(np.asarray(t.labels)[i, :n])
  return rows_t, rows_l


def run_sft(c, cfg: DecoderConfig, params, rows_t, rows_l, workdir: str):
  from ragjax.rl.optim import make_optimizer
  from ragjax.rl.sft import make_sft_batch, sft_loss_fn
  from ragjax.rl.train_step import init_train_state, jit_update, make_update
  s = c.sft
  optim = OptimConfig(lr=s.lr, schedule="cosine", warmup_steps=s.warmup_steps,
                      min_lr_ratio=s.min_lr_ratio, total_steps=s.steps,
                      weight_decay=s.weight_decay, grad_clip=1.0)
  optimizer = make_optimizer(optim)
  state = init_train_state(params, optimizer)
  loss_fn, denom = sft_loss_fn(cfg, context_weight=s.context_weight)
  updates = {}
  rng = np.random.default_rng(c.seed)
  history = []
  log_path = os.path.join(workdir, "sft_metrics.jsonl")
  # Batches are drawn from one width bucket at a time (chosen in proportion to its size), so
  # short traces are not padded to the longest and each width compiles once.
  width_of = np.asarray([pick_width(len(t), c.train_widths) for t in rows_t])
  buckets = {w: np.flatnonzero(width_of == w) for w in np.unique(width_of)}
  names = sorted(buckets)
  probs = np.asarray([len(buckets[w]) for w in names], np.float64)
  probs /= probs.sum()
  import tqdm
  with open(log_path, "w") as f:
    for step in tqdm.trange(1, s.steps + 1, desc="sft", disable=not c.progress):
      width = names[rng.choice(len(names), p=probs)]
      idx = rng.choice(buckets[width], s.batch_size)
      toks = np.stack([pad_to_width(rows_t[i][None], width, 0)[0] for i in idx])
      labs = np.stack([pad_to_width(rows_l[i][None], width, int(Source.PAD))[0] for i in idx])
      batch = make_sft_batch(toks, labs, gather=s.gather, context=s.context_weight > 0)
      shape = (width, None if batch.loss_index is None else batch.loss_index.shape[1])
      if shape not in updates:
        updates[shape] = jit_update(make_update(loss_fn, denom, optimizer, 1), state, batch, None)
      state, m = updates[shape](state, batch)
      if step % s.log_every == 0 or step == s.steps:
        rec = {"step": step, **{k: float(v) for k, v in jax.device_get(m).items()}}
        history.append(rec)
        f.write(json.dumps(rec) + "\n")
        f.flush()
  return state.params, history


# --- 4: GRPO ----------------------------------------------------------------------------------
def run_config(c, workdir: str) -> RunConfig:
  trainer = from_dict(TrainerConfig, c.trainer)
  if not trainer.workdir:
    trainer = dataclasses.replace(trainer, workdir=os.path.join(workdir, "grpo"),
                                  progress=c.progress)
  return RunConfig(rl=from_dict(RLConfig, c.rl), optim=from_dict(OptimConfig, c.optim),
                   trainer=trainer)


def run_grpo(c, cfg, params, tok, retriever, train, dev, fingerprint, workdir):
  run = run_config(c, workdir)
  params = jax.tree.map(lambda x: x.copy(), params)   # the update donates its state
  engine = make_engine(c, cfg, params, tok, retriever, greedy=False)
  eval_engine = make_engine(c, cfg, params, tok, retriever, greedy=True)
  rollout = EngineRollout(engine, run.rl.group_size, c.train_widths)
  eval_rollout = EngineRollout(eval_engine, 1, c.train_widths)
  trainer = Trainer(model_cfg=cfg, run=run, params=params, rollout_fn=rollout,
                    eval_rollout_fn=lambda p, prompts, rng: eval_rollout(p, prompts, rng, 1),
                    train_data=[as_record(e, i) for i, e in enumerate(train)],
                    dev_data=[as_record(e, i) for i, e in enumerate(dev)],
                    fingerprint=fingerprint)
  history = trainer.train()
  params = trainer.state.params
  history = [dict(h) for h in history]
  if c.keep_best and trainer.ckpt.best_step() is not None:
    params, _ = trainer.ckpt.restore_best(params)
    log(f"GRPO: keeping the best dev checkpoint (step {trainer.ckpt.best_step()})")
  trainer.ckpt.close()
  return params, history


# --- 5: evaluation ----------------------------------------------------------------------------
@dataclasses.dataclass
class SystemResult:
  name: str
  split: str
  em: list[float]
  qtypes: list[str]
  searches: list[int]
  batch: list          # RolloutBatch per chunk (for the viewer)
  responses: list[str]


def evaluate_system(c, name: str, cfg, params, tok, retriever, examples, split: str
                    ) -> SystemResult:
  """Greedy rollouts of every example in fixed-size chunks (one compiled shape)."""
  engine = make_engine(c, cfg, params, tok, retriever, greedy=True)
  chunk = c.eval.batch_size
  em, qtypes, searches, batches, responses = [], [], [], [], []
  for s in range(0, len(examples), chunk):
    exs = list(examples[s:s + chunk])
    n = len(exs)
    padded = exs + [exs[0]] * (chunk - n)        # keep one batch shape
    batch = engine.run([e.question for e in padded], samples_per_prompt=1, seed=c.seed)
    batches.append(batch)
    for i, ex in enumerate(exs):
      row = batch.meta.rows[i]
      em.append(answer_metrics(row.response_text, ex.golden_answers)["em"])
      qtypes.append(ex.metadata.get("qtype", "other"))
      searches.append(row.num_searches)
      responses.append(row.response_text)
  return SystemResult(name, split, em, qtypes, searches, batches, responses)


def sample_system(c, name: str, cfg, params, tok, retriever, examples, split: str, *,
                  samples: int, temperature: float, seed: int = 1
                  ) -> tuple[SystemResult, SystemResult]:
  """Sampled rollouts, `samples` per question at `temperature`: (pass@1, pass@k) results.

  pass@1 is each question's success rate, pass@k whether any sample succeeded.  Their gap
  over greedy EM is what RL can still sharpen (reward-weighted updates move probability
  toward answers the policy already samples)."""
  c = c.copy_and_resolve_references()
  c.sampler.temperature = float(temperature)
  engine = make_engine(c, cfg, params, tok, retriever, greedy=False)
  per_chunk = max(1, c.eval.batch_size // samples)
  wins = np.zeros((len(examples), samples))
  searches, batches = [], []
  for s in range(0, len(examples), per_chunk):
    exs = list(examples[s:s + per_chunk])
    padded = exs + [exs[0]] * (per_chunk - len(exs))     # keep one batch shape
    batch = engine.run([e.question for e in padded], samples_per_prompt=samples, seed=seed + s)
    batches.append(batch)
    for r, row in enumerate(batch.meta.rows[:len(exs) * samples]):
      q, j = divmod(r, samples)
      wins[s + q, j] = answer_metrics(row.response_text, exs[q].golden_answers)["em"]
      searches.append(row.num_searches)
  qtypes = [e.metadata.get("qtype", "other") for e in examples]
  tag = f"T={temperature:g}, {samples} samples"
  return (SystemResult(f"{name}, pass@1 ({tag})", split, list(wins.mean(1)), qtypes, searches,
                       batches, []),
          SystemResult(f"{name}, pass@{samples} ({tag})", split, list(wins.max(1)), qtypes,
                       searches, batches, []))


def results_table(results: Sequence[SystemResult]) -> tuple[str, list[dict]]:
  from ragjax.report.table import em_by_type, markdown_table
  rows = []
  for r in results:
    est = em_by_type(r.em, r.qtypes, QTYPES)
    rows.append({"split": r.split, "system": r.name, **est,
                 "searches": float(np.mean(r.searches)) if r.searches else float("nan")})
  return markdown_table(rows, ["all", *QTYPES]), rows


def write_viewer(result: SystemResult, examples, tok, out_path: str, limit: int = 40) -> str:
  """JSONL dump + HTML page of the first `limit` trajectories, with gold answers and EM."""
  from ragjax.rollout.dump import batch_records, write_jsonl
  from ragjax.rollout.viewer import page_html
  recs = [r for batch in result.batch for r in batch_records(batch, tok)][:len(examples)]
  for rec, ex, em in zip(recs, examples, result.em):
    rec.update(question=ex.question, golden_answers=list(ex.golden_answers), reward=em,
               qtype=ex.metadata.get("qtype"))
  recs = recs[:limit]
  write_jsonl(out_path[:-len(".html")] + ".jsonl", recs)
  with open(out_path, "w", encoding="utf-8") as f:
    f.write(page_html(recs, title=f"{result.name} on {result.split}"))
  return out_path


# --- the whole run ----------------------------------------------------------------------------
def run(c) -> dict:
  t_start = time.perf_counter()
  workdir = os.path.abspath(c.workdir)
  os.makedirs(workdir, exist_ok=True)
  timings = {}

  def mark(name, t0):
    timings[name] = round(time.perf_counter() - t0, 1)
    log(f"{name}: {timings[name]} s")

  t0 = time.perf_counter()
  world, paths, tok = prepare_world(c, workdir)
  mark("world_and_tokenizer", t0)
  log(f"world: {len(world.passages)} passages, "
      f"{ {s: len(q) for s, q in world.questions.items()} } questions, vocab {len(tok)}")

  t0 = time.perf_counter()
  retriever = build_retriever(c, paths["corpus"], workdir)
  mark("index", t0)

  cfg = policy_config(c, tok)
  params = init_params(cfg, jax.random.PRNGKey(c.seed))
  n_params = sum(int(x.size) for x in jax.tree.leaves(params))
  log(f"policy: {n_params / 1e6:.2f}M params from scratch")
  train, dev, test = (world.questions[s] for s in ("train", "dev", "test"))

  t0 = time.perf_counter()
  template = make_engine(c, cfg, params, tok, retriever, greedy=True)
  rows_t, rows_l = sft_trajectories(c, train, tok, retriever, template)
  mark("sft_traces", t0)
  t0 = time.perf_counter()
  sft_params, sft_hist = run_sft(c, cfg, params, rows_t, rows_l, workdir)
  mark("sft", t0)
  from ragjax.models.hf_io import save_decoder
  save_decoder(os.path.join(workdir, COLD_START_DIR), cfg, sft_params, tokenizer=tok)

  t0 = time.perf_counter()
  fingerprint = {"config": json.loads(c.to_json_best_effort())}
  rl_params, rl_hist = run_grpo(c, cfg, sft_params, tok, retriever, train, dev,
                               fingerprint, workdir)
  mark("grpo", t0)

  t0 = time.perf_counter()
  null = NullRetriever()
  results = []
  for split, exs in (("dev", dev), ("test", test)):
    exs = exs[:c.eval.max_questions or len(exs)]
    results.append(evaluate_system(c, "grpo + retrieval", cfg, rl_params, tok, retriever, exs, split))
    results.append(evaluate_system(c, "grpo, no retrieval", cfg, rl_params, tok, null, exs, split))
    results.append(evaluate_system(c, "cold-start (sft) + retrieval", cfg, sft_params, tok,
                                   retriever, exs, split))
  mark("evaluation", t0)
  t0 = time.perf_counter()
  probe = copy_probe(c, cfg, tok, retriever, template, {"cold start": sft_params, "grpo": rl_params},
                     (rows_t, rows_l), test)
  mark("probe", t0)
  summary = write_outputs(c, workdir, cfg, rl_params, tok, results, test, sft_hist, timings,
                          probe)
  timings["total"] = round(time.perf_counter() - t_start, 1)
  summary["timings_s"] = timings
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  log(f"done in {timings['total']} s; outputs in {workdir}")
  return summary


def copy_probe(c, cfg, tok, retriever, template, policies: dict, train_traces, test) -> dict:
  """Teacher-forced NLL of the policy tokens on train-world vs test-world traces, by region and
  name/word (see `ragjax.rl.trace_nll`): {"<policy> <split>": {(region, kind): (n, nll)}}."""
  from ragjax.rl.trace_nll import trace_nll
  n = c.probe.traces
  if n <= 0:
    return {}
  test_t, test_l = sft_trajectories(c, test[:n], tok, retriever, template)
  out = {}
  for name, params in policies.items():
    out[f"{name} train"] = trace_nll(cfg, params, tok, train_traces[0][:n], train_traces[1][:n])
    out[f"{name} test"] = trace_nll(cfg, params, tok, test_t, test_l)
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
  return {
      "test_em_with_retrieval": str(em_rl),
      "test_em_without_retrieval": str(em_no),
      "retrieval_ratio": (em_rl.mean / em_no.mean) if em_no.mean > 0 else float("inf"),
      "test_em_cold_start": str(bootstrap_mean(sft.em)),
      "grpo_minus_cold_start": str(bootstrap_diff(rl.em, sft.em)),
      "test_em_multi_hop": str(bootstrap_mean(multi)),
  }


def write_outputs(c, workdir, cfg, params, tok, results, test, sft_hist, timings,
                  probe: Optional[dict] = None) -> dict:
  from ragjax.models.hf_io import save_decoder
  from ragjax.report.plots import plot_curves, read_metrics
  table, _ = results_table(results)
  head = headline(results)
  md = ["# ragjax embedded default: results", "",
        "Exact match with 95% bootstrap intervals; the test world's entities never appear in "
        "training.", "", table, "", "## Headline (test world)", ""]
  md += [f"- {k}: {v}" for k, v in head.items()]
  if probe:
    from ragjax.rl.trace_nll import nll_table
    md += ["", "## Copy or memorise? (teacher-forced NLL of the policy's tokens)", "",
           "Same kind of scripted trace from a training world and from the test world: a policy "
           "that copies names scores both alike; one that memorised its training names does "
           "much worse on the test world's name pieces.", "", nll_table(probe)]
  md += ["", "## Time (s)", "", *[f"- {k}: {v}" for k, v in timings.items()]]
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  print(table)
  print("\n".join(f"{k}: {v}" for k, v in head.items()))
  plots = plot_curves(read_metrics(os.path.join(run_config(c, workdir).trainer.workdir,
                                                "metrics.jsonl")),
                      ("reward", "em", "searches_per_traj", "response_length", "dev/em"),
                      os.path.join(workdir, "plots"))
  plots += plot_curves(sft_hist, ("loss",), os.path.join(workdir, "plots", "sft"))
  rl_test = next(r for r in results if r.split == "test" and r.name == "grpo + retrieval")
  viewer = write_viewer(rl_test, test, tok, os.path.join(workdir, "trajectories.html"))
  policy_dir = os.path.join(workdir, "policy")
  save_decoder(policy_dir, cfg, params, tokenizer=tok)
  return {"table_markdown": os.path.join(workdir, "results.md"), "plots": plots,
          "viewer": viewer, "policy": policy_dir,
          "cold_start_policy": os.path.join(workdir, COLD_START_DIR), "headline": head,
          "copy_probe": {name: {f"{r}/{k}": v for (r, k), v in res.items()}
                         for name, res in (probe or {}).items()}}
