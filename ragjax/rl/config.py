"""Typed RL / optimiser / trainer configs, built from an ml-collections ConfigDict with checks.

The ConfigDict in `configs/*.py` is what users edit and override on the command line; these
dataclasses are what the code reads.  An unknown or misspelt field is an error naming its
full path, never silently ignored.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, Optional

from ragjax.rl.advantages import OUTCOME_ESTIMATORS
from ragjax.rl.losses import AGG_MODES, KL_ESTIMATORS


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """Every algorithmic choice of the update, by name (all logged with the run)."""
  advantage: str = "grpo"             # grpo | drgrpo | rloo | reinforce_pp_baseline | gae
  group_size: int = 5                 # samples per prompt
  adv_eps: float = 1e-6               # GRPO std denominator epsilon
  clip_low: float = 0.2
  clip_high: float = 0.2              # > clip_low is DAPO's clip-higher
  dual_clip: Optional[float] = None   # c > 1 caps negative-advantage losses at -A*c
  loss_agg: str = "token-mean"        # token-mean | seq-mean-token-mean | seq-mean-token-sum
  kl_coef: float = 0.001
  kl_estimator: str = "k3"            # k1 | k2 | k3 (k3 = verl low_var_kl)
  kl_in_reward: bool = False          # True: per-token -kl_coef*KL in the reward (PPO), no KL loss
  entropy_coef: float = 0.0
  value_clip: Optional[float] = 0.2
  gamma: float = 1.0
  lam: float = 1.0
  train_on: tuple = ("policy",)       # source labels trained on ("injected" for REX-RAG probes)
  use_sampler_logprobs: bool = False  # ratio denominator from the sampler instead of re-scoring
  temperature: float = 1.0
  logprob_chunk: int = 8192           # vocab chunk for log-probs
  gather: bool = False                # policy loss projects only the trained positions (same loss)
  ppo_epochs: int = 1
  mini_batch_size: int = 0            # trajectories per optimiser step; 0 = whole batch
  micro_batch_size: int = 0           # trajectories per gradient-accumulation slice; 0 = no split
  rewards: Mapping[str, float] = dataclasses.field(default_factory=lambda: {"search_r1_em": 1.0})
  reward_kwargs: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.advantage not in OUTCOME_ESTIMATORS + ("gae",):
      raise ValueError(f"rl.advantage={self.advantage!r}; known: {OUTCOME_ESTIMATORS + ('gae',)}")
    if self.loss_agg not in AGG_MODES:
      raise ValueError(f"rl.loss_agg={self.loss_agg!r}; known: {AGG_MODES}")
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"rl.kl_estimator={self.kl_estimator!r}; known: {KL_ESTIMATORS}")
    if self.dual_clip is not None and self.dual_clip <= 1.0:
      raise ValueError(f"rl.dual_clip must be > 1 (or None), got {self.dual_clip}")
    if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
      raise ValueError(f"rl.clip_low must be in [0, 1) and rl.clip_high >= 0, got "
                       f"{self.clip_low}, {self.clip_high}")
    if "retrieved" in self.train_on:
      raise ValueError("rl.train_on may not contain 'retrieved': retrieved tokens are observations")

  @property
  def uses_critic(self) -> bool:
    return self.advantage == "gae"

  @property
  def needs_reference(self) -> bool:
    return self.kl_coef != 0.0


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """AdamW with linear warmup then a cosine or constant schedule, and global-norm clipping."""
  lr: float = 1e-6
  schedule: str = "constant"          # constant | cosine
  warmup_steps: int = 0
  warmup_ratio: float = 0.0           # used when warmup_steps == 0
  min_lr_ratio: float = 0.0           # cosine floor as a fraction of lr
  total_steps: int = 1000             # optimiser steps the schedule spans
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  weight_decay: float = 0.01
  grad_clip: Optional[float] = 1.0

  def __post_init__(self):
    if self.schedule not in ("constant", "cosine"):
      raise ValueError(f"optim.schedule={self.schedule!r}; known: ('constant', 'cosine')")

  @property
  def warmup(self) -> int:
    return self.warmup_steps or int(self.warmup_ratio * self.total_steps)


def _is_dataclass_type(tp) -> bool:
  return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def from_dict(cls, data: Mapping[str, Any], path: str = ""):
  """Builds dataclass `cls` from a (nested) mapping; unknown fields raise naming the path."""
  if hasattr(data, "to_dict"):
    data = data.to_dict()
  if not isinstance(data, Mapping):
    raise TypeError(f"config {path or cls.__name__} must be a mapping, got {type(data).__name__}")
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - set(fields))
  if unknown:
    where = ", ".join(f"{path}.{k}" if path else k for k in unknown)
    raise ValueError(f"unknown config field(s) {where}; {cls.__name__} knows: {sorted(fields)}")
  hints = typing.get_type_hints(cls)
  kw = {}
  for name, value in data.items():
    tp = hints.get(name)
    if typing.get_origin(tp) is typing.Union:   # Optional[SomeConfig]
      inner = [a for a in typing.get_args(tp) if a is not type(None)]
      tp = inner[0] if len(inner) == 1 else tp
    if value is not None and _is_dataclass_type(tp):
      value = from_dict(tp, value, f"{path}.{name}" if path else name)
    elif hasattr(value, "to_dict"):
      value = value.to_dict()
    elif isinstance(value, list):
      value = tuple(value)
    kw[name] = value
  return cls(**kw)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{'rl': {'kl_coef': 0.1}} -> {'rl.kl_coef': 0.1}; used for logging and fingerprints."""
  if hasattr(data, "to_dict"):
    data = data.to_dict()
  out = {}
  for k, v in data.items():
    key = f"{prefix}.{k}" if prefix else str(k)
    if hasattr(v, "to_dict"):
      v = v.to_dict()
    if isinstance(v, Mapping) and v:
      out.update(flatten(v, key))
    else:
      out[key] = list(v) if isinstance(v, tuple) else v
  return out


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """The loop around the update: how long, how often to evaluate / save / log, where."""
  seed: int = 0
  num_steps: int = 1005               # RL steps (one rollout batch each)
  batch_prompts: int = 512            # prompts per step (x group_size trajectories)
  eval_every: int = 0                 # 0 = never during training
  eval_prompts: int = 0               # dev prompts per evaluation; 0 = all
  save_every: int = 1
  max_to_keep: int = 2
  keep_best_metric: str = "dev/em"    # chosen on dev, never test
  workdir: str = "/tmp/ragjax_run"
  progress: bool = True
  tensorboard: bool = True


# Fields a resumed run may change without being refused (they do not alter the trajectory).
RESUME_MUTABLE = frozenset({"trainer.num_steps", "trainer.workdir", "trainer.progress",
                            "trainer.tensorboard", "trainer.save_every", "trainer.max_to_keep",
                            "trainer.eval_every", "trainer.eval_prompts"})


def config_fingerprint(cfg: Mapping[str, Any]) -> dict[str, Any]:
  """The flattened config minus RESUME_MUTABLE: what a checkpoint must agree with."""
  return {k: v for k, v in flatten(cfg).items() if k not in RESUME_MUTABLE}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The sections of an experiment ConfigDict that ragjax.rl reads."""
  rl: RLConfig
  optim: OptimConfig
  trainer: TrainerConfig
  critic_optim: Optional[OptimConfig] = None


def parse_run_config(cfg) -> RunConfig:
  """Validates the rl / optim / critic_optim / trainer sections of an experiment ConfigDict
  (other sections belong to the model, data and rollout owners)."""
  d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
  sections = {k: d[k] for k in ("rl", "optim", "trainer", "critic_optim") if k in d and d[k] is not None}
  missing = [k for k in ("rl", "optim", "trainer") if k not in sections]
  if missing:
    raise ValueError(f"config lacks section(s) {missing}")
  run = from_dict(RunConfig, sections)
  if run.rl.uses_critic and run.critic_optim is None:
    raise ValueError("rl.advantage='gae' (PPO) needs a critic_optim section")
  return run
