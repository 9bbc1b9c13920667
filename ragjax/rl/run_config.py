"""Typed RL / optimiser / trainer configs, built from an ml-collections ConfigDict with checks.

The ConfigDict in `configs/*.py` is what users edit and override on the command line; these
dataclasses are what the code reads (`ragjax.typed_config.from_dict`: an unknown or misspelt
field is an error naming its full path).  Plug-in names (rewards, advantage estimators,
behaviour policies, batch filters, metrics) are checked against the registry when the config
is built, so a typo fails before any work.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from ragjax import registry
from ragjax.rl.advantages import WHITENINGS, uses_critic
from ragjax.rl.losses import AGG_MODES, KL_ESTIMATORS
from ragjax.rl.masks import TOKEN_MASKS, check_train_on
from ragjax.rl.selection import METRICS, SPLITS
from ragjax.typed_config import flatten, from_dict


# rl.value_head_init -> the std of the critic's fresh value-head weight, given the hidden size
VALUE_HEAD_INITS = {"zeros": lambda hidden: 0.0,
                    "verl": lambda hidden: 0.02,             # transformers' initializer_range
                    "openrlhf": lambda hidden: 1.0 / (hidden + 1)}


def value_head_std(kind: str, hidden: int) -> float:
  """The std of the value head's weight that `rl.value_head_init=kind` draws (0: zeros)."""
  return float(VALUE_HEAD_INITS[kind](hidden))


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """Every algorithmic choice of the update, by name (all logged with the run)."""
  advantage: str = "grpo"             # registered estimator (grpo, drgrpo, rloo, ...) or gae
  group_size: int = 5                 # samples per prompt
  adv_eps: float = 1e-6               # GRPO std denominator epsilon
  # GAE advantages whitened over the step's trained tokens: "" (not), "verl" (masked_whiten:
  # unbiased variance + 1e-8) or "openrlhf" (the replay buffer's normalize: biased, >= 1e-8)
  adv_whiten: str = ""
  # The tokens the whitening's mean and variance run over: "loss" (the policy's trained tokens)
  # or "response" (every token after the prompt, retrieved documents included: verl's
  # `compute_advantage` whitens over the response's attention mask)
  adv_whiten_mask: str = "loss"
  # The tokens the PPO critic values, runs GAE over and regresses on: "loss" (the policy's
  # trained tokens) or "response" (verl's critic: the response's attention mask)
  critic_mask: str = "loss"
  # The critic's fresh value head: "zeros", "verl" (AutoModelForTokenClassification: weight
  # N(0, 0.02^2), transformers' initializer_range, bias 0) or "openrlhf" (init_value_head:
  # weight N(0, (1 / (hidden + 1))^2))
  value_head_init: str = "zeros"
  clip_low: float = 0.2
  clip_high: float = 0.2              # > clip_low is DAPO's clip-higher
  dual_clip: Optional[float] = None   # c > 1 caps negative-advantage losses at -A*c
  clip_ratio: bool = True             # False: the plain ratio, no clip (UR²'s paper's reading)
  # token-mean (one mean over the update's tokens) | token-mean-per-micro-batch (verl: the mean
  # of each `loss_agg_rows` consecutive sequences' token mean) | seq-mean-token-mean (OpenRLHF,
  # TRL: the mean of each sequence's token mean) | seq-mean-token-sum
  loss_agg: str = "token-mean"
  loss_agg_rows: int = 0              # sequences per micro-batch of token-mean-per-micro-batch
  critic_loss_agg: str = ""           # the critic's value loss ("" = loss_agg)
  kl_coef: float = 0.001
  kl_estimator: str = "k3"            # k1 | k2 | k3 (k3 = verl low_var_kl)
  kl_in_reward: bool = False          # True: per-token -kl_coef*KL in the reward (PPO), no KL loss
  entropy_coef: float = 0.0
  value_clip: Optional[float] = 0.2
  gamma: float = 1.0
  lam: float = 1.0
  train_on: tuple = ("policy",)       # source labels trained on ("injected" for REX-RAG probes)
  use_sampler_logprobs: bool = False  # ratio denominator from the sampler instead of re-scoring
  temperature: Optional[float] = 1.0    # log-probs' temperature (a config's None: the sampler's)
  logprob_chunk: int = 8192           # vocab chunk for log-probs
  gather: bool = False                # policy loss projects only the trained positions (same loss)
  # The update runs only the rows with a non-zero advantage, on the whole batch's loss
  # normalisers (`ragjax.rl.batch.rows_with_gradient`): the same loss and gradient, without the
  # forward and backward of rows that add nothing (no KL loss, entropy bonus or critic); the
  # logged entropy / ratio / clip_frac / approx_kl_old are then means over the rows trained
  skip_zero_advantage_rows: bool = False
  ppo_epochs: int = 1
  mini_batch_size: int = 0            # trajectories per optimiser step; 0 = whole batch
  micro_batch_size: int = 0           # trajectories per gradient-accumulation slice; 0 = no split
  rewards: Mapping[str, float] = dataclasses.field(default_factory=lambda: {"search_r1_em": 1.0})
  reward_kwargs: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  behaviour: str = ""                 # registered behaviour policy for the ratio ("" = pi_old)
  behaviour_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  batch_filter: str = ""              # registered row filter before advantages ("" = keep all)
  batch_filter_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  metrics: tuple = ()                 # registered per-step metrics (e.g. AutoRefine's)
  # registered signature metrics (ragjax.rl.signatures): logged every step as signature/<name>
  # and compared question by question by `python -m ragjax.ablate`
  signatures: tuple = ()
  # Every policy turn is its own sample (R3-RAG; `ragjax.rl.step_samples`): its turn's
  # reward on its last token, GAE within the turn.  Needs the critic (advantage "gae").
  step_samples: bool = False

  def __post_init__(self):
    registry.check("advantage", [self.advantage], "rl.advantage")
    registry.check("reward", self.rewards, "rl.rewards")
    if not self.rewards:
      raise ValueError("rl.rewards is empty: every trajectory would score 0 and nothing would be "
                       "learnt; name at least one registered reward and its weight")
    for name, weight in dict(self.rewards).items():
      if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
          or not math.isfinite(weight):
        raise ValueError(f"rl.rewards: the weight of {name!r} must be a finite number, got "
                         f"{weight!r}")
    unknown = sorted(set(self.reward_kwargs) - set(self.rewards))
    if unknown:
      raise ValueError(f"rl.reward_kwargs: {unknown} are not in rl.rewards {sorted(self.rewards)}")
    for name, kwargs in dict(self.reward_kwargs).items():
      registry.check_kwargs("reward", name, kwargs, f"rl.reward_kwargs.{name}")
    if self.behaviour:
      registry.check("behaviour", [self.behaviour], "rl.behaviour")
      registry.check_kwargs("behaviour", self.behaviour, self.behaviour_kwargs,
                            "rl.behaviour_kwargs")
    if self.batch_filter:
      registry.check("batch_filter", [self.batch_filter], "rl.batch_filter")
      registry.check_kwargs("batch_filter", self.batch_filter, self.batch_filter_kwargs,
                            "rl.batch_filter_kwargs")
      # built once here so a bad value fails with the config, not after the model loads
      registry.lookup("batch_filter", self.batch_filter)(tokenizer=None,
                                                         **self.batch_filter_kwargs)
    registry.check("metric", self.metrics, "rl.metrics")
    registry.check("signature", self.signatures, "rl.signatures")
    for name in ("loss_agg", "critic_loss_agg"):
      mode = getattr(self, name)
      if mode not in AGG_MODES and not (name == "critic_loss_agg" and mode == ""):
        raise ValueError(f"rl.{name}={mode!r}; known: {AGG_MODES}")
      if mode == "token-mean-per-micro-batch" and self.loss_agg_rows < 1:
        raise ValueError(f"rl.{name}={mode!r} needs rl.loss_agg_rows >= 1 (sequences per "
                         f"micro-batch), got {self.loss_agg_rows}")
    if self.adv_whiten and (self.adv_whiten not in WHITENINGS or not self.uses_critic):
      raise ValueError(f"rl.adv_whiten={self.adv_whiten!r} whitens GAE advantages "
                       f"(rl.advantage='gae'; known: {sorted(WHITENINGS)} or ''), got "
                       f"rl.advantage={self.advantage!r}")
    for name in ("adv_whiten_mask", "critic_mask"):
      if getattr(self, name) not in TOKEN_MASKS:
        raise ValueError(f"rl.{name}={getattr(self, name)!r}; known: {TOKEN_MASKS}")
    if self.adv_whiten_mask == "response" and self.critic_mask != "response":
      raise ValueError("rl.adv_whiten_mask='response' needs rl.critic_mask='response': GAE "
                       "gives advantages only on the critic's tokens")
    if self.value_head_init not in VALUE_HEAD_INITS:
      raise ValueError(f"rl.value_head_init={self.value_head_init!r}; known: "
                       f"{tuple(VALUE_HEAD_INITS)}")
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"rl.kl_estimator={self.kl_estimator!r}; known: {KL_ESTIMATORS}")
    if self.dual_clip is not None and self.dual_clip <= 1.0:
      raise ValueError(f"rl.dual_clip must be > 1 (or None), got {self.dual_clip}")
    if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
      raise ValueError(f"rl.clip_low must be in [0, 1) and rl.clip_high >= 0, got "
                       f"{self.clip_low}, {self.clip_high}")
    check_train_on(self.train_on, "rl.train_on")
    if self.use_sampler_logprobs and "retrieved" in self.train_on:
      raise ValueError("rl.use_sampler_logprobs with rl.train_on holding 'retrieved': every row "
                       "holds retrieved tokens, so every row would be re-scored; set "
                       "rl.use_sampler_logprobs=False")
    if self.skip_zero_advantage_rows:
      bad = [f"{name}={value!r}" for name, value, ok in (
          ("kl_coef", self.kl_coef, self.kl_coef == 0 or self.kl_in_reward),
          ("entropy_coef", self.entropy_coef, self.entropy_coef == 0),
          ("advantage", self.advantage, not self.uses_critic),
          ("loss_agg", self.loss_agg, self.loss_agg != "token-mean-per-micro-batch")) if not ok]
      if bad:
        named = ", ".join("rl." + b for b in bad)
        raise ValueError(f"rl.skip_zero_advantage_rows: a row of zero advantage still has a "
                         f"gradient (or its own normaliser) with {named}; it needs no KL loss "
                         f"(kl_coef 0 or kl_in_reward), entropy_coef 0, no critic and a "
                         f"loss_agg other than token-mean-per-micro-batch")
    if self.step_samples:
      bad = [f"{name}={value!r}" for name, value, ok in (
          ("advantage", self.advantage, self.uses_critic),
          ("train_on", tuple(self.train_on), tuple(self.train_on) == ("policy",)),
          ("behaviour", self.behaviour, not self.behaviour),
          ("batch_filter", self.batch_filter, not self.batch_filter)) if not ok]
      if bad:
        raise ValueError(f"rl.step_samples trains a critic on each turn's own tokens: it needs "
                         f"rl.advantage='gae', rl.train_on=('policy',), no rl.behaviour and no "
                         f"rl.batch_filter; got "
                         f"{', '.join('rl.' + b for b in bad)}")
    if self.group_size < 1:
      raise ValueError(f"rl.group_size must be >= 1, got {self.group_size}")

  @property
  def uses_critic(self) -> bool:
    """The estimator trains a critic (GAE: `ragjax.rl.advantages.critic_estimator`)."""
    return uses_critic(self.advantage)

  @property
  def needs_reference(self) -> bool:
    return self.kl_coef != 0.0


CLOCKS = ("rl_step", "update")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """AdamW with linear warmup then a cosine or constant schedule, and global-norm clipping."""
  lr: float = 1e-6
  schedule: str = "constant"          # constant | cosine
  warmup_steps: int = 0
  warmup_ratio: float = 0.0           # used when warmup_steps == 0
  # The warmup spans at least this many schedule steps: 1 is verl's constant schedule, whose
  # factor min(1, step / max(1, num_warmup_steps)) runs the first step at 0 even with no warmup
  min_warmup_steps: int = 0
  min_lr_ratio: float = 0.0           # cosine floor as a fraction of lr
  # What one schedule step is in an RL run: "rl_step" (verl, Search-R1's family: the LR
  # scheduler steps once per RL step, whatever the updates in it) or "update" (OpenRLHF, TRL:
  # once per optimizer update).  SFT always counts updates.
  clock: str = "rl_step"
  # Schedule steps the schedule spans, in `clock` units (0 = the whole run, derived by
  # `parse_run_config`: trainer.num_steps, times the updates per RL step for "update").
  total_steps: int = 0
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  weight_decay: float = 0.01
  grad_clip: Optional[float] = 1.0

  def __post_init__(self):
    if self.schedule not in ("constant", "cosine"):
      raise ValueError(f"optim.schedule={self.schedule!r}; known: ('constant', 'cosine')")
    if self.clock not in CLOCKS:
      raise ValueError(f"optim.clock={self.clock!r}; known: {CLOCKS}")
    # (name, value, low, high, low included): a negative or non-finite value would train
    # the wrong way or diverge only after the whole set-up
    for name, v, lo, hi, closed in (
        ("lr", self.lr, 0.0, math.inf, True), ("warmup_ratio", self.warmup_ratio, 0.0, 1.0, True),
        ("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0, True), ("b1", self.b1, 0.0, 1.0, True),
        ("b2", self.b2, 0.0, 1.0, True), ("eps", self.eps, 0.0, math.inf, False),
        ("weight_decay", self.weight_decay, 0.0, math.inf, True)):
      if not (math.isfinite(v) and (lo <= v if closed else lo < v) and v <= hi):
        raise ValueError(f"{name} must be a finite number {'>=' if closed else '>'} {lo:g}"
                         + (f" and <= {hi:g}" if hi != math.inf else "") + f", got {v}")
    for name in ("b1", "b2"):               # Adam's bias correction divides by 1 - b**t
      if getattr(self, name) >= 1.0:
        raise ValueError(f"{name} must be < 1, got {getattr(self, name)}")
    for name in ("warmup_steps", "total_steps", "min_warmup_steps"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
    if self.grad_clip is not None and not (math.isfinite(self.grad_clip) and self.grad_clip > 0):
      raise ValueError(f"grad_clip must be a finite number > 0 (or None), got "
                       f"{self.grad_clip}")

  @property
  def warmup(self) -> int:
    return self.warmup_steps or int(self.warmup_ratio * self.total_steps)


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """The loop around the update: how long, how often to evaluate / save / log."""
  num_steps: int = 1000               # RL steps (one rollout batch each)
  batch_prompts: int = 512            # unique prompts per step (x group_size trajectories)
  eval_every: int = 50                # 0 = never during training
  eval_prompts: int = 0               # dev prompts per evaluation; 0 = all
  save_every: int = 50
  max_to_keep: int = 2
  # the split the periodic evaluations run on ("dev", or "test" where the authors chose on
  # test data: AutoRefine's valid_500) and at most how many questions of each data_source
  # (0 = all; `ragjax.rl.selection`)
  eval_split: str = "dev"
  eval_per_source: int = 0
  # "<eval_split>/<em|f1|cover_em>[_macro]": `_macro` averages over the data sources
  keep_best_metric: str = "dev/em"
  keep_best: bool = False             # the run's final policy is the best evaluated checkpoint
  tensorboard: bool = True
  step_retries: int = 3               # a step whose service stayed down is rerun from its start
  dump_every: int = 0                 # every Nth step's sampled rollouts, with their rewards and
                                      # gold answers, to rollouts/step_N.jsonl in the trainer's
                                      # directory (<workdir>/rl); python -m ragjax.rollout.viewer
                                      # reads them; 0 = never

  def __post_init__(self):
    for name in ("num_steps", "batch_prompts", "save_every", "max_to_keep"):
      if getattr(self, name) < 1:
        raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
    for name in ("eval_every", "eval_prompts", "step_retries", "dump_every", "eval_per_source"):
      if getattr(self, name) < 0:
        raise ValueError(f"trainer.{name} must be >= 0, got {getattr(self, name)}")
    if self.eval_split not in SPLITS:
      raise ValueError(f"trainer.eval_split={self.eval_split!r}; known: {SPLITS}")
    split, _, metric = self.keep_best_metric.partition("/")
    if split != self.eval_split or metric.removesuffix("_macro") not in METRICS:
      raise ValueError(f"trainer.keep_best_metric={self.keep_best_metric!r}: one of "
                       f"{self.eval_split}/{{{', '.join(METRICS)}}}[_macro] "
                       f"(trainer.eval_split={self.eval_split!r})")


# Fields (or whole sections, ending in '.') a resumed run may change without being refused:
# they do not alter the trajectory of the run.
RESUME_MUTABLE = ("trainer.num_steps", "trainer.save_every", "trainer.max_to_keep",
                  "trainer.keep_best", "trainer.keep_best_metric",   # which checkpoint is final
                  "trainer.eval_every", "trainer.eval_prompts", "trainer.tensorboard",
                  "trainer.eval_split", "trainer.eval_per_source",
                  "trainer.step_retries", "trainer.dump_every",   # logging only
                  "retriever.timeout", "retriever.deadline", "retriever.pin.",
                  "workdir", "progress", "hardware", "cpu_threads", "cpu_isa", "mesh.", "eval.",
                  "sampler.cpu_attention_kernel", "sampler.shared_prefix",
                  "probe.", "rl.signatures",   # logged and evaluated, never trained on
                  "rl.skip_zero_advantage_rows",   # the same update, fewer rows through it
                  "ablation.",                 # python -m ragjax.ablate's arms
                  # which recipe stages this invocation runs; where and how the judge is reached
                  "stage", "judge.url", "judge.api_key_env", "judge.max_concurrency",
                  "judge.max_retries", "judge.timeout", "judge.cache")


# Fields added after runs were checkpointed, each with the value that behaves as its absence
# did: a checkpoint (or cached cold start) written without the field matches a run that has it
# at this value, and no other.
ADDED_FIELDS = {"traces.answer_think": "names", "traces.second_search": False}


def resume_mutable(key: str) -> bool:
  return any(key == m or (m.endswith(".") and key.startswith(m)) for m in RESUME_MUTABLE)


def config_fingerprint(cfg: Mapping[str, Any]) -> dict[str, Any]:
  """The flattened config minus RESUME_MUTABLE: what a checkpoint must agree with, field by
  field (a mismatch names each differing field)."""
  return {k: v for k, v in flatten(cfg).items() if not resume_mutable(k)}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The sections of an experiment ConfigDict that ragjax.rl reads."""
  rl: RLConfig
  optim: OptimConfig
  trainer: TrainerConfig
  critic_optim: Optional[OptimConfig] = None


def updates_per_step(rl: RLConfig, trainer: TrainerConfig) -> int:
  """Optimizer updates of one RL step with no rows added or dropped: ceil(sequences /
  rl.mini_batch_size) x rl.ppo_epochs (verl's ppo_mini_batch_size counts sequences of the
  expanded batch; a mini-batch of 0 is the whole batch)."""
  rows = trainer.batch_prompts * rl.group_size
  return -(-rows // (rl.mini_batch_size or rows)) * rl.ppo_epochs


def derive_schedule_length(run: RunConfig) -> RunConfig:
  """optim.total_steps / critic_optim.total_steps = 0 span the run: trainer.num_steps RL
  steps (clock "rl_step": verl, warmup = ratio x RL steps), or that many RL steps' updates
  (clock "update")."""
  def span(o: Optional[OptimConfig]):
    if o is None or o.total_steps:
      return o
    per = 1 if o.clock == "rl_step" else updates_per_step(run.rl, run.trainer)
    return dataclasses.replace(o, total_steps=run.trainer.num_steps * per)
  return dataclasses.replace(run, optim=span(run.optim), critic_optim=span(run.critic_optim))


def scoring_temperature(rl: RLConfig, sampler: Optional[Mapping[str, Any]]) -> RLConfig:
  """rl.temperature (what the log-probs of the ratio are scored at) is the rollouts' own,
  `sampler.temperature`, when left None; set to another value it is refused, since the
  ratio pi / pi_old would then compare distributions the samples were not drawn from."""
  sampled = None if sampler is None else sampler.get("temperature")
  if rl.temperature is None:
    return dataclasses.replace(rl, temperature=1.0 if sampled is None else float(sampled))
  if sampled is not None and float(sampled) != float(rl.temperature):
    raise ValueError(f"rl.temperature={rl.temperature} differs from sampler.temperature="
                     f"{sampled}: log-probs must be scored at the temperature the rollouts "
                     f"were sampled at (leave rl.temperature unset to follow the sampler)")
  return rl


def parse_run_config(cfg) -> RunConfig:
  """Validates the rl / optim / critic_optim / trainer sections of an experiment ConfigDict
  (other sections belong to the model, data and rollout owners)."""
  d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
  sections = {k: d[k] for k in ("rl", "optim", "trainer", "critic_optim")
              if k in d and d[k] is not None}
  missing = [k for k in ("rl", "optim", "trainer") if k not in sections]
  if missing:
    raise ValueError(f"config lacks section(s) {missing}")
  run = derive_schedule_length(from_dict(RunConfig, sections))
  run = dataclasses.replace(run, rl=scoring_temperature(run.rl, d.get("sampler")))
  if run.rl.uses_critic and run.critic_optim is None:
    raise ValueError("rl.advantage='gae' (PPO) needs a critic_optim section")
  return run
