"""Engines from an experiment config: the `protocol`, `sampler` and `rollout` sections.

    engine = make_engine(c, cfg, params, tokenizer, retriever, greedy=False, mesh=mesh)

One place turns those sections into a protocol, a JAX `Sampler` (stop strings from the
protocol, eos from the model) and a `RolloutEngine`, so every recipe and the evaluation
command build the same loop from the same fields.
"""

from __future__ import annotations

from typing import Optional

from ragjax import registry
from ragjax.rollout import rex_rag  # noqa: F401  (registers the built-in rollout hooks)
from ragjax.rollout.engine import EngineConfig, RolloutEngine
from ragjax.rollout.protocols import Protocol, get_protocol
from ragjax.sampling.config import SamplerConfig
from ragjax.sampling.sampler import Sampler
from ragjax.typed_config import from_dict


def protocol_from_config(c) -> Protocol:
  section = c.protocol.to_dict() if hasattr(c.protocol, "to_dict") else dict(c.protocol)
  return get_protocol(section.pop("name"), **section)


def sampler_config(c, protocol: Protocol, eos_ids, *, greedy: bool,
                   temperature: Optional[float] = None) -> SamplerConfig:
  # An explicit temperature (evaluation's sampled rows) replaces any per-sample ladder.
  extra = {} if temperature is None else {"temperature": float(temperature), "temperatures": ()}
  return from_dict(SamplerConfig, c.sampler, "sampler", greedy=greedy,
                   stop_strings=protocol.stop_sequences, eos_ids=tuple(eos_ids), **extra)


def engine_config(c, pad_id: int) -> EngineConfig:
  r = c.rollout
  return EngineConfig(max_response_tokens=r.max_response_tokens or None,
                      spare_rows=r.spare_rows, widths=tuple(r.widths) or None,
                      pad_id=pad_id, chat=r.chat)


def make_hooks(c) -> list:
  """The rollout hooks `rollout.hooks` names ({name: kwargs}), built from the registry."""
  hooks = dict(c.rollout.hooks)
  registry.check("rollout_hook", hooks, "rollout.hooks")
  return [registry.lookup("rollout_hook", name)(**dict(kw or {})) for name, kw in hooks.items()]


def make_engine(c, model_cfg, params, tokenizer, retriever, *, greedy: bool,
                temperature: Optional[float] = None, mesh=None, hooks=None) -> RolloutEngine:
  """A `RolloutEngine` over a fresh JAX `Sampler` of `params`; `hooks` default to the
  config's (`rollout.hooks`); evaluation engines pass `hooks=[]`."""
  protocol = protocol_from_config(c)
  eos = tuple(model_cfg.eos_ids) or (tokenizer.eos_token_id,)
  sampler = Sampler(model_cfg, params, tokenizer,
                    sampler_config(c, protocol, eos, greedy=greedy, temperature=temperature),
                    mesh=mesh)
  pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
  return RolloutEngine(protocol, sampler, retriever, tokenizer, engine_config(c, pad_id),
                       hooks=make_hooks(c) if hooks is None else hooks)
