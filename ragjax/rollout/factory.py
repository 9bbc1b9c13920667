"""Engines from an experiment config: the `protocol`, `sampler` and `rollout` sections.

    engine = make_engine(c, cfg, params, tokenizer, retriever, greedy=False, mesh=mesh)

One place turns those sections into a protocol, a JAX `Sampler` (stop strings from the
protocol, eos from the model) and a `RolloutEngine`, so every recipe and the evaluation
command build the same loop from the same fields.
"""

from __future__ import annotations

from typing import Optional

from ragjax import registry
from ragjax.rollout.engine import EngineConfig, RolloutEngine
from ragjax.rollout.protocols import Protocol, get_protocol
from ragjax.sampling.sampler_config import SamplerConfig
from ragjax.sampling.sampler import Sampler
from ragjax.typed_config import from_dict


def protocol_section(c, evaluation: bool = False) -> dict:
  """The config's `protocol` fields; for `evaluation` engines with `eval.top_k` set, retrieving
  that many documents instead (AutoRefine's top-k-at-inference study trains at 3, evaluates
  1..7)."""
  section = c.protocol.to_dict() if hasattr(c.protocol, "to_dict") else dict(c.protocol)
  eval_k = c.eval.get("top_k", 0) if "eval" in c else 0
  if evaluation and eval_k:
    section["top_k"] = int(eval_k)
  return section


def protocol_from_config(c, evaluation: bool = False) -> Protocol:
  """The protocol of `protocol_section(c, evaluation)`."""
  section = protocol_section(c, evaluation)
  return get_protocol(section.pop("name"), **section)


def sampler_config(c, protocol: Protocol, eos_ids, *, greedy: bool,
                   temperature: Optional[float] = None) -> SamplerConfig:
  # An explicit temperature (evaluation's sampled rows) replaces any per-sample ladder.
  extra = {} if temperature is None else {"temperature": float(temperature), "temperatures": ()}
  return from_dict(SamplerConfig, c.sampler, "sampler", greedy=greedy,
                   stop_strings=protocol.stop_sequences, eos_ids=tuple(eos_ids), **extra)


def wave_rows(c, model_cfg, mesh_shape=None, cache_dtype: Optional[str] = None) -> int:
  """Sampler rows per rollout wave: `rollout.wave_rows`, else as many as fit
  `rollout.kv_budget_gb` per device (their KV cache plus their share of the prefill's
  attention activations), else 0 (the whole step at once).  Waves hold whole groups and split
  evenly over the mesh's batch axes.  `mesh_shape`: {axis: size} (a mesh's `.shape`)."""
  import math
  import numpy as np
  from ragjax.models.model_config import as_dtype
  from ragjax.parallel.memory import kv_row_bytes, layer_activation_bytes
  from ragjax.parallel.shard import batch_axes
  r = c.rollout
  if r.wave_rows or not r.kv_budget_gb:
    return int(r.wave_rows)
  shape = dict(mesh_shape or {})
  split = int(np.prod([shape.get(a, 1) for a in batch_axes()]))
  tensor = shape.get("tensor", 1)
  m = model_cfg
  kv = kv_row_bytes(m.num_layers, c.sampler.max_cache_length, m.num_kv_heads, m.head_dim, tensor,
                    np.dtype(as_dtype(cache_dtype or m.dtype)).itemsize)
  prefill = layer_activation_bytes(1, max(c.sampler.prompt_buckets), m.hidden_size,
                                   m.intermediate_size, m.num_heads, tensor,
                                   np.dtype(as_dtype(m.dtype)).itemsize)
  g = c.rl.group_size
  per_device = int(r.kv_budget_gb * 1e9 // (kv + prefill / g))
  unit = g * split // math.gcd(g, split)            # whole groups, even over the devices
  return max(unit, per_device * split // unit * unit)


def engine_config(c, pad_id: int, wave: int = 0) -> EngineConfig:
  r = c.rollout
  return EngineConfig(max_response_tokens=r.max_response_tokens or None,
                      spare_rows=r.spare_rows, widths=tuple(r.widths) or None,
                      wave_rows=wave, refill=r.refill, decode_chunk=r.decode_chunk,
                      pad_id=pad_id, chat=r.chat)


def make_hooks(c) -> list:
  """The rollout hooks `rollout.hooks` names ({name: kwargs}), built from the registry."""
  hooks = dict(c.rollout.hooks)
  registry.check("rollout_hook", hooks, "rollout.hooks")
  for name, kw in hooks.items():
    registry.check_kwargs("rollout_hook", name, kw, f"rollout.hooks.{name}")
  return [registry.lookup("rollout_hook", name)(**dict(kw or {})) for name, kw in hooks.items()]


def make_engine(c, model_cfg, params, tokenizer, retriever, *, greedy: bool,
                temperature: Optional[float] = None, mesh=None, hooks=None,
                evaluation: bool = False, sampler: Optional[Sampler] = None) -> RolloutEngine:
  """A `RolloutEngine` over a fresh JAX `Sampler` of `params`; `hooks` default to the
  config's (`rollout.hooks`); evaluation engines pass `hooks=[]` and `evaluation=True`.

  `sampler`: reuse this one (an earlier engine's `sampler`, made from the same config, greedy
  flag and temperature) with `params` installed, so its compiled programs serve the new engine
  too: evaluating several policies or retrievers one after the other compiles once."""
  protocol = protocol_from_config(c, evaluation)
  eos = tuple(model_cfg.eos_ids) or (tokenizer.eos_token_id,)
  config = sampler_config(c, protocol, eos, greedy=greedy, temperature=temperature)
  if sampler is None:
    sampler = Sampler(model_cfg, params, tokenizer, config, mesh=mesh)
  elif sampler.cfg != model_cfg or sampler.config != config or sampler.mesh is not mesh:
    raise ValueError("make_engine: the sampler to reuse was made for another model, sampler "
                     "config or mesh")
  else:
    sampler.set_params(params)
  pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
  wave = wave_rows(c, model_cfg, None if mesh is None else mesh.shape, sampler.cache_dtype)
  return RolloutEngine(protocol, sampler, retriever, tokenizer, engine_config(c, pad_id, wave),
                       hooks=make_hooks(c) if hooks is None else hooks)
