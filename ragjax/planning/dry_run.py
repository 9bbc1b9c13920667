"""Dry run: will this config fit on that hardware?  Built abstractly, no weights, no devices.

    python -m ragjax.train --config=configs/search_r1.py:qwen2.5-3b --dry_run --target=h100x8

Per device, from the config's own sections (model, mesh, rl, trainer, sampler, rollout): params
(fp32 master copy), the AdamW state (mu and nu, like params), gradients during the update, the
frozen reference policy (when a KL term needs it), the critic (PPO), the rollout's KV cache for
one wave of rows, the sampler's per-row state, and the train step's activations for one
micro-batch.  With LoRA (`model.lora.rank > 0`) the base is frozen and is the reference; the
adapters (replicated, fp32) get the optimizer state, and the merged kernels appear twice (the
sampler's copy and the update's) with their cotangents.  Shardings come from the same
logical-axis rules that place the real arrays
(`ragjax.parallel.memory`).  Activations are an estimate (attention scores are materialised:
[rows, heads, T, T] fp32 per layer in flight); every other line is exact array bytes, which
`tests/test_dry_run.py` checks against arrays placed on a CPU mesh.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np
from flax import traverse_util
from jax.sharding import PartitionSpec

from ragjax.models.model_config import DecoderConfig, as_dtype
from ragjax.models.decoder import abstract_params, param_logical_axes
from ragjax.models.kv_cache import STACKED_AXES
from ragjax.models.lora import LoraConfig, init_adapters
from ragjax.parallel.memory import (GB, MeshShape, Target, array_bytes, layer_activation_bytes,
                                   sharded_bytes, tree_bytes)
from ragjax.parallel.shard import batch_axes
from ragjax.rl.run_config import parse_run_config
from ragjax.rollout.engine import spare_prompts, spare_rows_for
from ragjax.rollout.factory import make_hooks, wave_rows
from ragjax.typed_config import from_dict

USABLE = 0.9          # share of device memory a plan may fill (runtime, fragmentation)


@dataclasses.dataclass
class Line:
  name: str
  bytes: float
  note: str = ""


@dataclasses.dataclass
class Plan:
  target: Target
  mesh: MeshShape
  lines: list
  wave_rows: int

  @property
  def total(self) -> float:
    return sum(l.bytes for l in self.lines)

  @property
  def fits(self) -> bool:
    return self.total <= USABLE * self.target.device_bytes

  def table(self) -> str:
    t = self.target
    out = [f"dry run on {t.name}: {t.devices} x {t.kind}, {t.device_bytes / GB:.0f} GB each; "
           f"mesh {dict(self.mesh.shape)}",
           "| per device | GB | |", "|---|---|---|"]
    out += [f"| {l.name} | {l.bytes / GB:.2f} | {l.note} |" for l in self.lines]
    verdict = "fits" if self.fits else "does NOT fit"
    out.append(f"| total | {self.total / GB:.2f} | {verdict} in {USABLE:.0%} of "
               f"{t.device_bytes / GB:.0f} GB |")
    return "\n".join(out)


def model_config(c, vocab_size: Optional[int] = None) -> DecoderConfig:
  """The policy's shape without loading weights: the checkpoint's config.json, the preset, or
  the from-scratch shape (whose vocabulary comes from the tokenizer: pass `vocab_size`)."""
  from ragjax.models.presets import resolve_decoder_config
  m = c.model
  dt = dict(dtype=m.dtype, param_dtype=m.param_dtype, scan_layers=m.scan_layers, remat=m.remat,
            remat_policy=m.get("remat_policy", "full"))
  if m.checkpoint or m.preset:
    return resolve_decoder_config(m.checkpoint or m.preset, **dt)
  return DecoderConfig(arch="qwen2", vocab_size=vocab_size or 2048, hidden_size=m.hidden_size,
                       intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       tie_word_embeddings=True, **dt)


def rollout_rows(c, cfg: DecoderConfig, mesh: MeshShape, cache_dtype: str) -> int:
  """Sampler rows of one rollout wave (`ragjax.rollout.factory.wave_rows`: the config's cap
  or its KV budget), at most the step's rows, plus the spare rows hooks clone into, as the
  engine reserves them for a wave: whole groups, a multiple of the mesh's batch devices."""
  g = c.rl.group_size
  rows = c.trainer.batch_prompts * g
  wave = min(rows, wave_rows(c, cfg, mesh.shape, cache_dtype) or rows)
  if c.rollout.spare_rows == -1:
    spare = spare_rows_for(-1, make_hooks(c), wave)
  else:
    spare = -(-c.rollout.spare_rows * wave // rows)
  split = int(np.prod([mesh.shape[a] for a in batch_axes()]))
  return (wave // g + spare_prompts(wave // g, g, spare, split)) * g


def rows_per_device(rows: int, mesh: MeshShape) -> int:
  split = max(1, min(rows, int(np.prod([mesh.shape[a] for a in batch_axes()]))))
  return max(1, -(-rows // split))


def layer_peak_bytes(cfg: DecoderConfig, b: int, length: int, mesh: MeshShape) -> float:
  return layer_activation_bytes(b, length, cfg.hidden_size, cfg.intermediate_size,
                                cfg.num_heads, mesh.shape["tensor"],
                                np.dtype(as_dtype(cfg.dtype)).itemsize)


def activation_bytes(cfg: DecoderConfig, rows: int, length: int, mesh: MeshShape,
                     logprob_chunk: int) -> float:
  """Estimated peak activations of one micro-batch's forward+backward on one device."""
  b = rows_per_device(rows, mesh)
  act = np.dtype(as_dtype(cfg.dtype)).itemsize
  peak = layer_peak_bytes(cfg, b, length, mesh)
  kept = cfg.num_layers * (b * length * remat_kept_per_token(cfg, mesh) * act if cfg.remat
                           else peak)
  logits = 2 * b * length * min(logprob_chunk, cfg.vocab_size) * 4
  return float(kept + (peak if cfg.remat else 0) + logits)


def remat_kept_per_token(cfg: DecoderConfig, mesh: MeshShape) -> float:
  """Values a rematerialised layer keeps per token for its backward pass: its input, and with
  remat_policy "dots" its projections' outputs too (heads and MLP split over `tensor`)."""
  if cfg.remat_policy == "full":
    return cfg.hidden_size
  t = mesh.shape["tensor"]
  qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
  return 3 * cfg.hidden_size + (qkv + 2 * cfg.intermediate_size) / t


def lora_config(c) -> LoraConfig:
  section = c.model.get("lora", None)
  return LoraConfig() if section is None else from_dict(LoraConfig, section, "model.lora")


def lora_lines(cfg: DecoderConfig, lora: LoraConfig, params: float, mesh: MeshShape,
               pdt) -> list:
  """The param-side lines of a LoRA run (see the module docstring)."""
  abstract = abstract_params(cfg)
  adapters = jax.eval_shape(lambda: init_adapters(abstract, lora, jax.random.PRNGKey(0)))
  ad = float(sum(array_bytes(x.shape, np.float32) for x in jax.tree.leaves(adapters)))
  flat = traverse_util.flatten_dict(abstract)
  axes = traverse_util.flatten_dict(param_logical_axes(cfg),
                                    is_leaf=lambda _, x: isinstance(x, PartitionSpec))
  hit = [k for k in flat if k[-1] == "kernel" and k[-2] in lora.targets]
  targeted = float(sum(sharded_bytes(flat[k].shape, pdt, tuple(axes[k]), mesh) for k in hit))
  return [Line("params (frozen base)", params,
               f"{cfg.num_params() / 1e9:.2f}B x {np.dtype(pdt).name}; also the reference"),
          Line("LoRA adapters", ad, f"rank {lora.rank} on {'/'.join(lora.targets)}, fp32, "
                                    f"replicated"),
          Line("optimizer (AdamW mu, nu)", 2 * ad, "adapters only"),
          Line("gradients", ad + targeted, "adapters + the merged kernels' cotangents"),
          Line("merged kernels", 2 * targeted, "the sampler's copy and the update's")]


def memory_plan(c, target: Target, vocab_size: Optional[int] = None) -> Plan:
  run = parse_run_config(c)
  cfg = model_config(c, vocab_size)
  mesh = MeshShape.resolve(c.mesh, target.devices)
  pdt = as_dtype(cfg.param_dtype)
  params = tree_bytes(abstract_params(cfg), param_logical_axes(cfg), mesh, pdt)
  lora = lora_config(c)
  if lora.enabled:
    lines = lora_lines(cfg, lora, params, mesh, pdt)
  else:
    lines = [Line("params", params, f"{cfg.num_params() / 1e9:.2f}B x {np.dtype(pdt).name}"),
             Line("optimizer (AdamW mu, nu)", 2 * params, "sharded like params"),
             Line("gradients", params, "fp32, during the update")]
    if run.rl.needs_reference:
      lines.append(Line("reference policy", params, "frozen copy for the KL term"))
  if run.rl.uses_critic:
    critic = tree_bytes(abstract_params(cfg, "value"), param_logical_axes(cfg, "value"), mesh,
                        pdt)
    lines.append(Line("critic (params, AdamW, grads)", 4 * critic, "PPO value model"))
  cache_len = c.sampler.max_cache_length
  cache_dt = "bfloat16" if target.kind[:3] in ("NVI", "TPU") else cfg.dtype
  rows = rollout_rows(c, cfg, mesh, cache_dt)
  shape = (cfg.num_layers, rows, cache_len, cfg.num_kv_heads, cfg.head_dim)
  kv = 2 * sharded_bytes(shape, as_dtype(cache_dt), STACKED_AXES, mesh)  # either layout
  lines.append(Line("KV cache (one rollout wave)", kv,
                    f"{rows} rows x {cache_len} slots, {cache_dt} (at its longest)"))
  prompts = max(1, rows // c.rl.group_size)
  chunk = min(prompts, c.sampler.get("prefill_chunk", 0) or prompts)
  bucket = max(c.sampler.prompt_buckets)
  lines.append(Line("prefill activations", layer_peak_bytes(
      cfg, rows_per_device(chunk, mesh), bucket, mesh),
      f"{chunk} prompts x {bucket} tokens per prefill call, one layer in flight (estimate)"))
  state = sharded_bytes((rows, cfg.vocab_size), np.float32, ("batch", None), mesh)
  state += sharded_bytes((rows, cache_len), np.int32, ("batch", None), mesh)
  lines.append(Line("sampler row state", state, "next-token logits, token history"))
  micro = run.rl.micro_batch_size or run.rl.mini_batch_size or rows
  length = max(c.rollout.widths) if c.rollout.widths else cache_len
  lines.append(Line("activations (one micro-batch)",
                    activation_bytes(cfg, micro, length, mesh, run.rl.logprob_chunk),
                    f"{micro} rows x {length} tokens, remat={cfg.remat} (estimate)"))
  return Plan(target, mesh, lines, rows)
