"""`configs/autorefine.py:tiny` and `configs/rezero.py:tiny` end to end through
`python -m ragjax.train` (real engine, sampler, BM25 index, trainer, orbax) on the synthetic
world: checkpoints, per-step metrics (AutoRefine's search / refine success, ReZero's six reward
terms), dev metrics and the exported policy are written, and both resume.  ReZero runs with
LoRA and its judge is the frozen base policy in the training process; every paper ablation
switch is one field that validates."""

import json
import os
import shutil

import pytest

from _recipe_helpers import ROOT, TESTS, finish as _finish, read_metrics as _metrics, train
COMMON = ["--config.progress=False", "--config.trainer.eval_every=2",
          "--config.trainer.eval_prompts=4", "--config.trainer.save_every=1"]
# A random tiny policy never answers right, so the papers' rewards alone give no gradient:
# gin binds a dense reward next to them (and, for ReZero, one that asks the judge every row).
AUTOREFINE = ["--config=configs/autorefine.py:tiny", "--gin_file",
              os.path.join(TESTS, "dense_reward.gin"),
              "--config.rl.rewards={'autorefine': 1.0, 'test_vowels': 1.0}"]
REZERO = ["--config=configs/rezero.py:tiny", "--gin_file", os.path.join(TESTS, "judge_reward.gin"),
          "--config.rl.rewards={'rezero_correctness': 4.0, 'rezero_format': 2.0, "
          "'rezero_retry': 1.0, 'rezero_em_chunk': 1.0, 'rezero_strategy': 1.0, "
          "'rezero_diversity': 1.0, 'test_vowels': 1.0, 'test_judge': 0.0}",
          "--config.retriever.noise.kind=drop_gold", "--config.retriever.noise.p=0.5"]


def _train(workdir, config, *args):
  return train([config, f"--config.workdir={workdir}", *COMMON, *args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Both recipes for 2 steps, then each resumed from a copy for a third (in parallel)."""
  ar, rz = str(tmp_path_factory.mktemp("autorefine")), str(tmp_path_factory.mktemp("rezero"))
  procs = [_train(ar, *AUTOREFINE, "--config.trainer.num_steps=2"),
           _train(rz, *REZERO, "--config.trainer.num_steps=2")]
  for p in procs:
    _finish(p)
  resumed = [str(tmp_path_factory.mktemp("autorefine_resumed")),
             str(tmp_path_factory.mktemp("rezero_resumed"))]
  for src, dst in zip((ar, rz), resumed):
    shutil.copytree(src, dst, dirs_exist_ok=True)
  procs = [_train(resumed[0], *AUTOREFINE, "--config.trainer.num_steps=3"),
           _train(resumed[1], *REZERO, "--config.trainer.num_steps=3")]
  for p in procs:
    _finish(p)
  return ar, rz, resumed


def _written(workdir):
  assert os.path.isdir(os.path.join(workdir, "rl", "latest", "2"))
  assert os.path.isdir(os.path.join(workdir, "rl", "best"))
  assert os.path.exists(os.path.join(workdir, "policy", "model.safetensors"))


def test_autorefine_tiny_trains_logs_its_metrics_and_resumes(runs):
  ar, _, resumed = runs
  m = _metrics(ar)
  assert [r["step"] for r in m] == [1, 2] and "dev/em" in m[1]
  assert m[0]["trajectories"] == 20 and m[0]["grad_norm"] > 0
  for key in ("autorefine/search_success", "autorefine/refine_success",
              "autorefine/searches_per_rollout", "reward/autorefine"):
    assert key in m[0] and key in m[1], key
  assert m[0]["autorefine/searches_per_rollout"] == m[0]["searches_per_traj"]
  _written(ar)
  again = _metrics(resumed[0])
  assert [r["step"] for r in again] == [1, 2, 3] and again[:2] == m


def test_rezero_tiny_trains_lora_with_the_in_process_judge_and_resumes(runs):
  _, rz, resumed = runs
  m = _metrics(rz)
  assert [r["step"] for r in m] == [1, 2] and "dev/em" in m[1]
  assert m[0]["trajectories"] == 8                      # 2 prompts x 4 samples
  for name in ("correctness", "format", "retry", "em_chunk", "strategy", "diversity"):
    assert f"reward/rezero_{name}" in m[0], name
  # the judge (frozen base policy, this process) answered one request per row
  assert m[0]["reward/test_judge"] == 1.0 and m[0]["services/judge/calls"] >= 8
  # one on-policy step per batch: ratio 1, nothing clipped; KL to the base starts at 0
  assert m[0]["ratio"] == pytest.approx(1.0, abs=1e-5) and m[0]["clip_frac"] == 0.0
  assert abs(m[0]["kl"]) < 1e-6 and m[0]["grad_norm"] > 0
  _written(rz)
  with open(os.path.join(rz, "rl", "latest", "2", "state", "_METADATA")) as f:
    keys = json.load(f)["tree_metadata"]
  assert all("lora_" in k for k in keys if "params" in k)   # only adapters are checkpointed
  again = _metrics(resumed[1])
  assert [r["step"] for r in again] == [1, 2, 3] and again[:2] == m


def _config(spec, **overrides):
  import importlib.util
  file, _, arg = spec.partition(":")
  mspec = importlib.util.spec_from_file_location("cfg_" + os.path.basename(file)[:-3],
                                                 os.path.join(ROOT, file))
  module = importlib.util.module_from_spec(mspec)
  mspec.loader.exec_module(module)
  c = module.get_config(arg)
  for key, value in overrides.items():
    node = c
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    node[leaf] = value
  return c


@pytest.mark.parametrize("spec", ["configs/autorefine.py:qwen2.5-3b-base",
                                  "configs/autorefine.py:qwen2.5-3b-instruct",
                                  "configs/autorefine.py:qwen2.5-7b-base",
                                  "configs/rezero.py:llama-3.2-3b-instruct"])
def test_real_sizes_validate_with_the_papers_hyperparameters(spec, tmp_path):
  from ragjax.wiring.components import validate
  from ragjax.rollout.factory import protocol_from_config
  train = tmp_path / "train.jsonl"          # validate checks that question files exist
  train.write_text('{"id": "0", "question": "q?", "golden_answers": ["a"]}\n')
  c = _config(spec, **{"data.train_files": (str(train),)})
  run = validate(c)
  proto = protocol_from_config(c)
  if "autorefine" in spec:
    assert (run.trainer.batch_prompts, run.rl.group_size, run.optim.lr, run.rl.kl_coef) == \
        (256, 5, 1e-6, 0.001)
    # cmd/train.sh's total_training_steps=300, of which verl's loop trains 299, best
    # evaluation kept; verl mini-batches of 256 sequences: 1,280 / 256 = 5 updates per step,
    # in micro-batches of 8 sequences for the loss; the first step at lr 0 (verl's schedule)
    assert (run.optim.schedule, run.optim.warmup, run.trainer.num_steps) == ("constant", 0, 299)
    assert run.optim.min_warmup_steps == 1
    assert run.trainer.keep_best and (run.rl.loss_agg, run.rl.loss_agg_rows) == \
        ("token-mean-per-micro-batch", 8)
    assert run.rl.mini_batch_size == 256
    assert (proto.max_turns, proto.final_turn, proto.obs_max_tokens, proto.top_k) == \
        (5, True, 512, 3)
    assert run.rl.rewards == {"autorefine": 1.0} and run.rl.metrics == ("autorefine",)
  else:
    assert (run.rl.group_size, run.rl.adv_eps, run.rl.kl_coef, run.rl.loss_agg) == \
        (8, 1e-4, 0.04, "token-mean")
    assert (run.rl.ppo_epochs, run.rl.mini_batch_size, run.optim.grad_clip) == (1, 0, 0.1)
    assert (run.optim.schedule, run.optim.warmup, run.optim.lr) == ("cosine", 100, 5e-6)
    assert dict(run.rl.rewards) == {"rezero_correctness": 4.0, "rezero_format": 2.0,
                                    "rezero_retry": 1.0, "rezero_em_chunk": 1.0,
                                    "rezero_strategy": 1.0, "rezero_diversity": 1.0}
    assert (c.model.lora.rank, c.model.lora.alpha, len(c.model.lora.targets)) == (64, 64.0, 7)
    assert (proto.top_k, proto.max_turns, proto.max_response_tokens) == (2, 20, 4096)
    assert proto.today == "04 Apr 2025" and c.judge.kind == "base"


@pytest.mark.parametrize("spec,field,value", [
    ("configs/autorefine.py:tiny", "rl.reward_kwargs.autorefine.refine_score", 0.0),
    ("configs/autorefine.py:tiny", "protocol.refine", False),
    ("configs/autorefine.py:tiny", "eval.top_k", 5),
    ("configs/autorefine.py:tiny", "protocol.template", "paper"),
    ("configs/rezero.py:tiny", "rl.rewards.rezero_retry", 0.0),
    ("configs/rezero.py:tiny", "rl.reward_kwargs.rezero_retry.retry_counting", "after_first"),
    ("configs/rezero.py:tiny", "retriever.noise.kind", "shuffle"),
])
def test_each_ablation_is_one_field(spec, field, value):
  from ragjax.wiring.components import validate
  from ragjax.rollout.factory import protocol_from_config
  over = {field: value}
  if field == "retriever.noise.kind":
    over["retriever.noise.p"] = 0.3
  c = _config(spec, **over)
  validate(c)
  if field == "protocol.refine":
    from ragjax.rollout.protocols.base import PromptInput
    proto = protocol_from_config(c)
    assert "<information>" in proto.user_message(PromptInput("q"))
  if field == "eval.top_k":
    assert protocol_from_config(c).top_k == 2 and protocol_from_config(c, True).top_k == 5


@pytest.mark.parametrize("spec", ["configs/autorefine.py:qwen2.5-3b-base",
                                  "configs/autorefine.py:qwen2.5-7b-base",
                                  "configs/rezero.py:llama-3.2-3b-instruct"])
def test_real_sizes_fit_their_papers_hardware_in_the_dry_run(spec):
  """Built abstractly (no weights): AutoRefine on 8 A100s, ReZero on 1 H200."""
  from ragjax.parallel.memory import parse_target
  from ragjax.planning.dry_run import memory_plan
  c = _config(spec)
  plan = memory_plan(c, parse_target(c.hardware))
  assert plan.fits, plan.table()
  lines = {l.name: l.bytes for l in plan.lines}
  if "rezero" in spec:
    # rank 64 on all seven projections of 28 layers: (q 3072+3072, k 3072+1024, v 3072+1024,
    # o 3072+3072, gate/up 3072+8192 each, down 8192+3072) x 64 x 28 fp32 values
    per_layer = 6144 + 4096 + 4096 + 6144 + 3 * 11264
    assert lines["LoRA adapters"] == per_layer * 64 * 28 * 4
    assert lines["optimizer (AdamW mu, nu)"] == 2 * lines["LoRA adapters"]
    assert "reference policy" not in lines       # the frozen base is the reference
  else:
    assert lines["optimizer (AdamW mu, nu)"] == 2 * lines["params"]


def test_world_scale_configs_refine_traces_and_compact_prompts():
  """`:world` (for `python -m ragjax.ablate`): the world's cold start teaches `<refine>` after
  documents for AutoRefine; ReZero's prompt is the world's short one, observations inline."""
  from ragjax.data.world_traces import TraceShares, make_scripts, with_refine
  from ragjax.wiring.components import validate
  from ragjax.rollout.factory import protocol_from_config
  from ragjax.rollout.protocols.base import PromptInput
  ar, rz = _config("configs/autorefine.py:world"), _config("configs/rezero.py:world")
  for c in (ar, rz):
    validate(c)
    assert c.recipe == "world" and c.rollout.chat is False
  ex = {"id": "q", "question": "Where was the author of Vumo born?", "golden_answers": ["Nosur"],
        "metadata": {"qtype": "2hop", "hops": [{"query": "Vumo author", "answer": "Tokom"},
                                               {"query": "where was Tokom born",
                                                "answer": "Nosur"}]}}
  plain = ["<search> Vumo author </search>", "<search> where was Tokom born </search>",
           "<answer> Nosur </answer>"]
  assert make_scripts([ex], 0, TraceShares(wasted_query_rate=0.0)) == [plain]
  assert make_scripts([ex], 0, TraceShares(wasted_query_rate=0.0), refine=True) == [[
      "<search> Vumo author </search>",
      "<refine> Tokom </refine> <search> where was Tokom born </search>",
      "<refine> Nosur </refine> <answer> Nosur </answer>"]]
  wasted = ["<search> Where was the author of Vumo born </search>"] + plain
  assert with_refine(ex, wasted)[1] == "<refine> not found </refine> <search> Vumo author </search>"
  retry = {"metadata": {"first_query": "Tokom", "decoy_answers": ["Libroston"], "hops": []}}
  assert with_refine(retry, ["<search> Tokom </search>", "<answer> Libroston </answer>"]) == [
      "<search> Tokom </search>", "<refine> Libroston </refine> <answer> Libroston </answer>"]
  assert ar.traces.refine and ar.rl.rewards.to_dict() == {"autorefine": 1.0}
  proto = protocol_from_config(rz)
  assert proto.messages(PromptInput("Who?")) == [{"role": "user", "content": "Question: Who?\n"}]
  assert proto.stop_sequences == ("</search>", "</answer>")
  assert (rz.retriever.noise.kind, rz.retriever.noise.p, rz.model.lora.rank) == ("drop_gold", 0.5, 8)
  with pytest.raises(ValueError, match="protocol.prompt"):
    from ragjax.rollout.protocols import get_protocol
    get_protocol("rezero", prompt="no placeholder")


def test_a_bad_judge_is_refused_before_any_work():
  from ragjax.wiring.components import validate
  with pytest.raises(ValueError, match="judge.kind='bsae'"):
    validate(_config("configs/rezero.py:tiny", **{"judge.kind": "bsae"}))
  with pytest.raises(ValueError, match="judge.kind='url' needs judge.url"):
    validate(_config("configs/rezero.py:tiny", **{"judge.kind": "url"}))
