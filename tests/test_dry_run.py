"""The dry-run memory plan: exact lines equal the bytes real arrays hold per device on a CPU
mesh; the activation estimate is within a factor of the compiled step's own memory analysis;
every real-size config fits the paper's hardware."""

import importlib.util
import os
import sys

import jax
import numpy as np
import pytest

from ragjax.parallel.memory import MeshShape, Target, parse_target
from ragjax.planning.dry_run import memory_plan
import _preloaded as preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")


def load(name):
  spec = importlib.util.spec_from_file_location(f"cfg_{name}", os.path.join(CONFIGS, f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def device0_bytes(tree) -> int:
  """Bytes of every array of `tree` that device 0 holds."""
  dev = jax.devices()[0]
  total = 0
  for leaf in jax.tree.leaves(tree):
    for shard in leaf.addressable_shards:
      if shard.device == dev:
        total += shard.data.nbytes
  return total


def small_config():
  c = load("search_r1").get_config("tiny")
  c.model.update(dict(preset="tiny", dtype="float32", param_dtype="float32"))
  c.mesh.update(dict(data=1, fsdp=4, tensor=2))
  c.rl.update(dict(group_size=2, micro_batch_size=4, mini_batch_size=8, kl_coef=0.01))
  c.trainer.batch_prompts = 4
  c.sampler.update(dict(max_cache_length=128, prompt_buckets=(64,)))
  c.rollout.widths = (128,)
  return c


def test_parse_target_and_mesh_resolution():
  t = parse_target("v5p-32")
  assert t.devices == 16 and t.device_bytes == 95e9
  assert parse_target("h100x8").devices == 8
  with pytest.raises(ValueError, match="unknown accelerator"):
    parse_target("k80x2")
  assert MeshShape.resolve({"data": 1, "fsdp": -1, "tensor": 2}, 16).shape == \
      {"data": 1, "fsdp": 8, "tensor": 2}
  with pytest.raises(ValueError, match="needs 32 devices"):
    MeshShape.resolve({"data": 4, "fsdp": 4, "tensor": 2}, 16)


def test_exact_lines_equal_placed_arrays_and_activations_match_the_compiled_step():
  from ragjax.models.decoder import init_params
  from ragjax.models.presets import get_preset
  from ragjax.parallel.mesh import mesh_from_config
  from ragjax.rl.run_config import parse_run_config
  from ragjax.rl.optim import make_optimizer
  from ragjax.rl.train_step import (init_train_state, jit_update, make_update, policy_loss_fn,
                                    shard_train_state)
  from ragjax.rl.batch import make_train_batch
  from ragjax.rollout.labels import Source
  from ragjax.sampling import Sampler, SamplerConfig
  c = small_config()
  plan = memory_plan(c, Target("cpu8", 8, 1e12, "CPU"))
  lines = {l.name: l.bytes for l in plan.lines}
  mesh = mesh_from_config(c.mesh)
  cfg = get_preset("tiny")
  run = parse_run_config(c)
  opt = make_optimizer(run.optim)
  state = shard_train_state(init_train_state(init_params(cfg, jax.random.PRNGKey(0)), opt), cfg,
                            mesh, opt)
  assert lines["params"] == device0_bytes(state.params)
  # AdamW's mu and nu mirror the params; its step counters are a few replicated scalars
  assert 0 <= device0_bytes(state.opt_state) - lines["optimizer (AdamW mu, nu)"] <= 64
  # the KV cache of one rollout wave, as the sampler lays it out over the mesh (here the
  # prompt and first turn already need every slot: the grown cache is at its longest)
  rows = c.trainer.batch_prompts * c.rl.group_size
  sampler = Sampler(cfg, state.params, None, SamplerConfig(
      max_cache_length=128, prompt_buckets=(64,), extend_buckets=(16,), max_new_tokens=4),
      mesh=mesh)
  s = sampler.prefill([[1, 2, 3]] * c.trainer.batch_prompts, samples_per_prompt=c.rl.group_size)
  assert s.tokens.shape[0] == rows
  from ragjax.models.kv_cache import width
  assert width(s.cache) == 128
  assert lines["KV cache (one rollout wave)"] == device0_bytes(s.cache)
  # activations: the estimate is within 4x of what XLA plans for one micro-batch's update
  b, t = c.rl.micro_batch_size, 128
  labels = np.full((b, t), Source.POLICY, np.int8)
  labels[:, :16] = Source.PROMPT
  batch = make_train_batch(np.ones((b, t), np.int32), labels, np.ones(b, np.float32),
                           np.zeros((b, t), np.float32), ref_logprobs=np.zeros((b, t), np.float32))
  from ragjax.rl.train_step import batch_shardings
  batch = jax.device_put(batch, batch_shardings(batch, mesh))
  loss_fn, denom = policy_loss_fn(cfg, run.rl)
  step = jit_update(make_update(loss_fn, denom, opt, 1), state, batch, mesh)
  temp = step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes
  est = lines["activations (one micro-batch)"]
  assert temp / 4 <= est <= temp * 4, (est, temp)


def real_size_configs():
  out = []
  for f in sorted(os.listdir(CONFIGS)):
    if not f.endswith(".py") or f.startswith(("_", "common")):
      continue
    module = load(f[:-3])
    for arg in getattr(module, "ARGS", ()):
      c = module.get_config(arg)
      if c.get("hardware", ""):
        out.append((f"{f[:-3]}:{arg}", c))
  return out


@pytest.mark.parametrize("name,c", real_size_configs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_real_size_config_fits_its_papers_hardware(name, c):
  plan = memory_plan(c, parse_target(c.hardware))
  assert plan.fits, f"{name} on {c.hardware}:\n{plan.table()}"


def test_dry_run_command_prints_the_plan_and_exits_by_fit():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  ok = preloaded.run([sys.executable, "-m", "ragjax.train", "--config=configs/search_r1.py:qwen2.5-3b",
                       "--dry_run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert "dry run on h100x8" in ok.stdout and "| total |" in ok.stdout and "fits" in ok.stdout
  # the derived plan against the paper's (configs/paper_plans/search_r1.json) comes first
  assert "| optimizer updates per RL step | 10 | 10 | = paper (code) |" in ok.stdout
  # verl's rollout top-p, which train_grpo.sh keeps; the retriever pinned while no index is set
  assert "| sampling top-p | 0.95 | 0.95 | = paper (code) |" in ok.stdout
  assert "| retriever encoder | e5-base-v2 | e5-base-v2 | = paper (code) |" in ok.stdout
  assert "| retriever index (exact / approximate) | exact | exact | = paper (code) |" in ok.stdout
  assert "differ without a reason" in ok.stdout and "0 differ without a reason" in ok.stdout
  small = preloaded.run([sys.executable, "-m", "ragjax.train",
                          "--config=configs/search_r1.py:qwen2.5-7b", "--dry_run", "--target=v5e-4"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert small.returncode == 3 and "does NOT fit" in small.stdout


def test_wave_rows_from_a_budget_by_hand():
  """rows per device = budget / (KV per row + prefill activations per prompt / G), rounded
  down to whole groups spread evenly over the batch axes."""
  from ragjax.models.presets import get_preset
  from ragjax.rollout.factory import wave_rows
  c = small_config()
  cfg = get_preset("tiny")            # 2 layers? read the shape, compute by hand below
  c.rollout.kv_budget_gb = 0.01
  kv = 2 * cfg.num_layers * 128 * (cfg.num_kv_heads // 2 if cfg.num_kv_heads % 2 == 0
                                   else cfg.num_kv_heads) * cfg.head_dim * 4
  prefill = 64 * (8 * cfg.hidden_size + 3 * cfg.intermediate_size / 2) * 4 \
      + 2 * (cfg.num_heads / 2) * 64 * 64 * 4
  per_device = int(0.01e9 // (kv + prefill / 2))
  want = per_device * 4 // 4 * 4      # batch split 4 (fsdp), groups of 2: unit lcm(2, 4) = 4
  assert wave_rows(c, cfg, {"data": 1, "fsdp": 4, "tensor": 2}, "float32") == want
  c.rollout.wave_rows = 6
  assert wave_rows(c, cfg, {"data": 1, "fsdp": 4, "tensor": 2}) == 6      # an explicit cap wins


def test_remat_keeps_by_policy_by_hand():
  """Values per token a rematerialised layer keeps: its input under "full"; under "dots" its
  input, o_proj and down_proj outputs (3 E) and its q/k/v and gate/up outputs split over
  tensor ((4 + 2 x 2) x 16 + 2 x 128 = 384, halved)."""
  from ragjax.models.presets import get_preset
  from ragjax.planning.dry_run import remat_kept_per_token
  mesh = MeshShape.resolve({"data": 1, "fsdp": -1, "tensor": 2}, 8)
  cfg = get_preset("tiny").replace(remat=True)
  assert remat_kept_per_token(cfg, mesh) == 64
  assert remat_kept_per_token(cfg.replace(remat_policy="dots"), mesh) == 3 * 64 + 384 / 2
