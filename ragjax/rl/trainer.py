"""The RL loop: prompts -> rollout (the engine) -> rewards -> advantages -> update, with
evaluation, metrics, exact-resume checkpoints, keep-best by dev score and a NaN/Inf guard.

    trainer = Trainer(model_cfg=cfg, run=run, params=params, engine=engine,
                      eval_engine=greedy_engine, train_data=train, dev_data=dev,
                      fingerprint=config_fingerprint(c), workdir=w, seed=c.seed, mesh=mesh)
    trainer.train()

The engine (`ragjax.rollout.engine.RolloutEngine`) gets the step's unique prompt records and
the group size and returns one `RolloutBatch`; it may hold more rows than prompts x G (REX-RAG
clones join their prompt's group).  Rewards, metrics and step rewards read each row's metadata
record; the method parts (reward, batch filter, advantage estimator, behaviour policy, metrics)
are looked up in `ragjax.registry` by the config's names, so no method name appears here.  The
step's batch is built once (`ragjax.rl.step_batch`: the rows with their masks, log-probs and
rewards) and its metrics in `ragjax.rl.step_metrics`.  A batch filter may drop rows after
rewards and old log-probs (`StepBatch.select`); the update then sees a variable
row count, padded with rows that train on nothing up to whole mini-batches (`_minibatches`).
Every step is a deterministic function of (params, optimizer state, RNG key, data position,
method state), all checkpointed, so a run killed at any point resumes to the same params and
metrics.

`adapter` (e.g. `ragjax.models.lora.LoraAdapter`) splits the policy into trainable params (the
train state: optimised and checkpointed) and a frozen base (an input of the update, never
donated, and the KL reference); the sampler and the scorer get the two combined.  `services`
(`{"judge": ChatModel}`, built by the recipe from the config) reach rewards as `ctx.services`.
"""

from __future__ import annotations

import copy
import inspect
import os
import time
import warnings
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from ragjax import registry
from ragjax.errors import STORAGE_ERRNOS, ServiceUnavailable, StorageError
from ragjax.metrics import answer_metrics
from ragjax.models.model_config import DecoderConfig
from ragjax.parallel.distributed import global_array, is_main, to_host
from ragjax.parallel.shard import batch_sharding
from ragjax.rl.batch import TrainBatch, pad_batch_rows, rows_with_gradient
from ragjax.rl.checkpoint import Checkpointer
from ragjax.rl.run_config import RunConfig
from ragjax.rl.logprobs import sequence_logprobs, sequence_values
from ragjax.rl.masks import loss_mask, unsampled_rows
from ragjax.rl.metrics_log import MetricsLog
from ragjax.rl.optim import learning_rate_schedule, make_optimizer, with_learning_rate
from ragjax.rl.rewards import RewardContext, score_rows
from ragjax.rl.selection import evaluation_metrics, record_source
from ragjax.rl.step_batch import StepBatch, build_step_batch, step_advantages, to_train_batch
from ragjax.rl.step_context import StepContext
from ragjax.rl.step_metrics import step_metrics
from ragjax.models.sharded import decoder_shardings
from ragjax.parallel.mesh import replicated
from ragjax.rl.train_step import (NonFiniteError, batch_shardings, init_train_state, jit_update,
                                  make_update, nonfinite_keys, place_train_state, policy_loss_fn,
                                  value_loss_fn)
from ragjax.rollout.dump import dump_batch
from ragjax.rollout.trajectory import RolloutBatch, concat


# A whole-batch update (rl.mini_batch_size=0) is padded to a multiple of this many rows (or of
# rl.micro_batch_size), so a variable row count compiles a few update shapes, not one per count.
ROW_MULTIPLE = 8
# the policy update's token means that `rl.skip_zero_advantage_rows` reports over the rows
# trained (the loss and pg_loss are the whole batch's either way)
ROW_MEANS = ("entropy", "clip_frac", "approx_kl_old", "ratio")


def _log_line(msg: str) -> None:
  if is_main():
    print(f"[ragjax {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class DataCursor:
  """Epoch-wise seeded shuffling with a resumable (epoch, offset) position."""

  def __init__(self, n: int, seed: int, epoch: int = 0, offset: int = 0):
    if n == 0:
      raise ValueError("the training set is empty")
    self.n, self.seed, self.epoch, self.offset = n, seed, epoch, offset

  def _perm(self):
    return np.random.default_rng([self.seed, self.epoch]).permutation(self.n)

  def take(self, k: int) -> list[int]:
    out = []
    while len(out) < k:
      perm = self._perm()
      take = min(k - len(out), self.n - self.offset)
      out.extend(int(i) for i in perm[self.offset:self.offset + take])
      self.offset += take
      if self.offset == self.n:
        self.epoch, self.offset = self.epoch + 1, 0
    return out

  def state(self) -> dict:
    return {"epoch": self.epoch, "offset": self.offset}


class Trainer:
  """Runs `run.trainer.num_steps` RL steps in `workdir`, resuming if a checkpoint exists."""

  def __init__(self, *, model_cfg: DecoderConfig, run: RunConfig, params, engine,
               train_data: Sequence[Mapping[str, Any]], fingerprint: Mapping[str, Any],
               workdir: str, seed: int = 0, dev_data: Optional[Sequence[Mapping]] = None,
               eval_engine=None, critic_params=None, ref_params=None, mesh=None,
               progress: bool = True, adapter=None, services: Optional[Mapping] = None):
    self.cfg, self.run = model_cfg, run
    self.rl, self.tc = run.rl, run.trainer
    self.engine, self.eval_engine = engine, eval_engine or engine
    self.train_data, self.dev_data = list(train_data), list(dev_data or [])
    for i, ex in enumerate(self.train_data):
      for field in ("question", "golden_answers"):
        if field not in ex:
          raise ValueError(f"training record {i} has no {field!r} field (keys: {sorted(ex)})")
    self.workdir, self.seed, self.mesh, self.progress = os.path.abspath(workdir), seed, mesh, progress
    # Multi-host: every process runs this loop on the whole (gathered) batch; the arrays of the
    # update are global, and only the main process writes logs.
    self.main, self.multiprocess = is_main(), jax.process_count() > 1
    self.method_state: dict = {}
    tokenizer = getattr(engine, "tokenizer", None)   # the policy's, for plug-ins that tokenise
    if self.tc.dump_every and tokenizer is None:
      raise ValueError("trainer.dump_every needs a rollout engine with a tokenizer")
    self.tokenizer = tokenizer
    self.behaviour = (registry.lookup("behaviour", self.rl.behaviour)(
        tokenizer=tokenizer, **self.rl.behaviour_kwargs) if self.rl.behaviour else None)
    self.batch_filter = (registry.lookup("batch_filter", self.rl.batch_filter)(
        tokenizer=tokenizer, **self.rl.batch_filter_kwargs) if self.rl.batch_filter else None)
    self.metric_fns = {name: registry.lookup("metric", name) for name in self.rl.metrics}
    self._metric_ctx = {name for name, fn in self.metric_fns.items()
                        if "ctx" in inspect.signature(fn).parameters}
    self.services = dict(services or {})     # e.g. {"judge": ChatModel}, read by rewards
    self._service_calls: dict = {}
    # clock "rl_step" (verl): one learning rate per RL step, set before its updates
    # (`_set_learning_rates`); "update": the schedule follows optax's update count.
    self.optimizer = make_optimizer(run.optim, per_rl_step=run.optim.clock == "rl_step")
    # `adapter` (e.g. ragjax.models.lora.LoraAdapter): only its trainable params are optimised
    # and checkpointed; the frozen base is an input of the update and the reference policy.
    self.adapter, self.frozen, self._merged = adapter, None, None
    if adapter is not None:
      trainable, base = adapter.split(params)
      self.frozen = base if mesh is None else jax.device_put(base, decoder_shardings(model_cfg, mesh))
      self._combine = jax.jit(adapter.combine)
      self.state = place_train_state(
          init_train_state(trainable, self.optimizer), model_cfg, mesh, self.optimizer,
          param_shardings=None if mesh is None else jax.tree.map(lambda _: replicated(mesh),
                                                                 trainable))
    else:
      params = jax.tree.map(jnp.copy, params)    # the update donates its state: keep the caller's
      self.state = place_train_state(init_train_state(params, self.optimizer), model_cfg, mesh,
                                     self.optimizer)
    self.ref_params = None
    if self.rl.needs_reference:   # the frozen reference is skipped when kl_coef == 0
      self.ref_params = (ref_params if ref_params is not None else self.frozen
                         if adapter is not None else jax.tree.map(jnp.copy, self.state.params))
    self.critic = None
    if self.rl.uses_critic:
      if critic_params is None:
        raise ValueError("rl.advantage='gae' needs critic_params (a Decoder with head='value')")
      self.critic_optimizer = make_optimizer(
          run.critic_optim, per_rl_step=run.critic_optim.clock == "rl_step")
      self.critic = place_train_state(init_train_state(critic_params, self.critic_optimizer),
                                      model_cfg, mesh, self.critic_optimizer, head="value")
    self.key = jax.random.PRNGKey(seed)
    self.cursor = DataCursor(len(self.train_data), seed)
    self.ckpt = Checkpointer(self.workdir, fingerprint, self.tc.max_to_keep,
                             best_metric=self.tc.keep_best_metric if self.dev_data else None)
    self.log = MetricsLog(os.path.join(self.workdir, "metrics.jsonl"))
    self._score = jax.jit(lambda p, t, q, a: sequence_logprobs(
        self.cfg, p, t, q, a, chunk=self.rl.logprob_chunk, temperature=self.rl.temperature))
    self._values = jax.jit(lambda p, t, q, a: sequence_values(self.cfg, p, t, q, a))
    self._updates: dict = {}
    self.history: list[dict] = []

  def policy_params(self):
    """The params the policy runs with: the trained params, or the base with the adapters
    merged in (computed once per state)."""
    if self.adapter is None:
      return self.state.params
    if self._merged is None or self._merged[0] is not self.state:
      self._merged = (self.state, self._combine(self.state.params, self.frozen))
    return self._merged[1]

  # --- checkpoint ------------------------------------------------------------------------
  def _ckpt_tree(self):
    """The arrays of a checkpoint (global on a multi-host mesh); the RNG key rides in the JSON
    part, which every process holds whole."""
    tree = {"train": self.state}
    if self.critic is not None:
      tree["critic"] = self.critic
    return tree

  def maybe_resume(self) -> int:
    """Restores the newest finished checkpoint that reads back whole (0 when none; a damaged
    one is reported and set aside, `Checkpointer.restore_intact`) and trims the metrics log
    to it."""
    step, tree, extra = self.ckpt.restore_intact(self._ckpt_tree(), log=_log_line)
    if step is None:
      if self.main:
        self.log.truncate(None)
      return 0
    self.state, self.key = tree["train"], jnp.asarray(extra["rng"], jnp.uint32)
    self.critic = tree.get("critic", self.critic)
    self.cursor = DataCursor(len(self.train_data), self.seed, **extra["data_position"])
    self.method_state = dict(extra.get("method_state", {}))
    if self.main:
      self.log.truncate(step)
    return step

  def _save(self, step: int):
    self.ckpt.save(step, self._ckpt_tree(), {"data_position": self.cursor.state(),
                                            "method_state": self.method_state, "step": step,
                                            "rng": np.asarray(self.key).tolist()})

  def _log(self, metrics: dict, writer):
    if not self.main:
      return
    self.log.append(metrics)
    if writer is not None:
      for k, v in metrics.items():
        if k != "step" and isinstance(v, (int, float)):
          writer.add_scalar(k, v, metrics["step"])

  # --- one step --------------------------------------------------------------------------
  def _update_fn(self, kind: str, batch, num_micro: int):
    key = (kind, jax.tree.map(lambda x: x.shape, batch), num_micro)
    if key not in self._updates:
      combine = hidden_fn = None
      if kind == "policy":
        opt, state, frozen = self.optimizer, self.state, self.frozen
        if frozen is not None:    # LoRA: the adapter-aware forward (or the merged one)
          combine, hidden_fn = self.adapter.train_combine, self.adapter.hidden_fn(self.cfg)
        loss_fn, denom = policy_loss_fn(self.cfg, self.rl, hidden_fn)
      else:
        loss_fn, denom = value_loss_fn(self.cfg, self.rl)
        opt, state, frozen = self.critic_optimizer, self.critic, None
      self._updates[key] = jit_update(make_update(loss_fn, denom, opt, num_micro, combine), state,
                                      batch, self.mesh, frozen)
    return self._updates[key]

  def _rollout(self, engine, prompts: Sequence[Mapping], uids: Sequence[int], group_size: int,
               rng) -> RolloutBatch:
    engine.set_params(self.policy_params())
    seed = int(jax.random.randint(rng, (), 0, 2**31 - 1))
    return engine.run(prompts, samples_per_prompt=group_size, seed=seed, uids=uids)

  def _context(self, step: int, sb: StepBatch, prompts: Sequence[Mapping],
               behaviour=None) -> StepContext:
    return StepContext(step=step, rollout=sb.rollout,
                       examples=[prompts[row.prompt_index] for row in sb.rows],
                       rewards=sb.rewards, old_logprobs=sb.old_logprobs, loss_mask=sb.loss_mask,
                       num_prompts=len(prompts), group_size=self.rl.group_size, rl=self.rl,
                       method_state=self.method_state, behaviour_logprobs=behaviour)

  def _build_batch(self, batch: RolloutBatch, prompts: Sequence[Mapping], uids: Sequence[int],
                   step: int, results=None) -> tuple[Optional[TrainBatch], dict]:
    """Rewards (unless given) -> the step batch (masks built once) -> old and reference
    log-probs -> the batch filter -> critic values -> advantages -> behaviour policy ->
    TrainBatch and metrics.  The TrainBatch is None when the filter kept no row."""
    if results is None:
      results = self._rewards(batch, prompts, uids, step)
    if self.tc.dump_every and step % self.tc.dump_every == 0 and self.main:
      self._dump(step, batch, prompts, results)
    sb = build_step_batch(batch, results, train_on=self.rl.train_on,
                          step_samples=self.rl.step_samples,
                          multiple=self.rl.mini_batch_size or self.rl.micro_batch_size or 8)
    t_score = time.perf_counter()           # forwards that score the batch (ragjax.bench.grpo_step)
    sb = self._score_batch(sb)
    generated = len(sb.rows)
    before = None
    if self.batch_filter is not None:       # what was generated, before the filter keeps rows
      ans = [answer_metrics(row.answer, prompts[row.prompt_index]["golden_answers"])
             for row in sb.rows]
      before = {"generated/reward": float(sb.rewards.mean()),
                "generated/em": float(np.mean([a["em"] for a in ans])),
                "generated/f1": float(np.mean([a["f1"] for a in ans]))}
    tokens = int(sb.attention_mask.sum())
    sb = self._filter(sb, prompts, step)
    if sb is None:      # every metric of the step is then the generated rows'
      return None, {"reward": before["generated/reward"], "em": before["generated/em"],
                    "f1": before["generated/f1"], "tokens": tokens, "trained_tokens": 0,
                    "trajectories_generated": generated, "trajectories": 0,
                    "update_skipped": 1, **before, **getattr(self.batch_filter, "last", {})}
    if self.rl.uses_critic:
      sb = sb.replace(values=to_host(self._values(self.critic.params, *self._model_inputs(sb))))
    score_s = time.perf_counter() - t_score
    advantages, returns = step_advantages(sb, self.rl)
    behaviour = None
    if self.behaviour is not None:   # e.g. REX-RAG's mixture mu over clones
      behaviour = self.behaviour(sb.rollout, sb.old_logprobs, self.method_state)
    train_batch = to_train_batch(sb, advantages, self.rl, behaviour=behaviour, returns=returns)
    stats = step_metrics(sb, self._context(step, sb, prompts, behaviour),
                         reward_names=list(self.rl.rewards), metric_fns=self.metric_fns,
                         wants_ctx=self._metric_ctx, signatures=self.rl.signatures,
                         score_s=score_s,
                         generated=generated if self.batch_filter is not None else None)
    stats.update(self._service_calls_since_last_step())
    if before is not None:
      stats.update(before)
      stats.update(getattr(self.batch_filter, "last", {}))
    return train_batch, stats

  def _dump(self, step: int, batch: RolloutBatch, prompts: Sequence[Mapping], results) -> None:
    """The step's sampled rollouts, as generated (before any batch filter), with each row's
    reward, its components and its question's gold answers: `rollouts/step_<step>.jsonl`."""
    out = os.path.join(self.workdir, "rollouts")
    os.makedirs(out, exist_ok=True)
    extra = [{"step": step, "question": prompts[row.prompt_index]["question"],
              "golden_answers": list(prompts[row.prompt_index]["golden_answers"]),
              "reward_components": dict(r.components)}
             for row, r in zip(batch.rows, results)]
    path = os.path.join(out, f"step_{step:06d}.jsonl")
    dump_batch(path + ".tmp", batch, self.tokenizer, [r.total for r in results], extra,
               trained=loss_mask(batch.traj.labels, self.rl.train_on))
    os.replace(path + ".tmp", path)

  def _rewards(self, batch: RolloutBatch, prompts: Sequence[Mapping], uids: Sequence[int],
               step: int) -> list:
    """Each row's reward (`rl.rewards`), errors naming the row's dataset record."""
    ctxs = [RewardContext(row, prompts[row.prompt_index], step, self.services)
            for row in batch.rows]
    records = [str(prompts[row.prompt_index].get("id", uids[row.prompt_index]))
               for row in batch.rows]
    return score_rows(self.rl.rewards, ctxs, self.rl.reward_kwargs, records)

  def _model_inputs(self, sb: StepBatch) -> tuple:
    return tuple(self._device(x) for x in (sb.tokens, sb.positions, sb.attention_mask))

  def _score_batch(self, sb: StepBatch) -> StepBatch:
    """The old log-probs (re-scored, or the sampler's) and the reference's, when a KL uses it."""
    args = self._model_inputs(sb)
    if self.rl.use_sampler_logprobs:
      old = np.array(sb.sampler_logprobs, np.float32)
      rescore = unsampled_rows(sb.labels, sb.loss_mask)
      if rescore:      # rows trained on tokens the sampler did not draw: those rows re-scored
        old[rescore] = self._score_rows(sb, rescore)
    else:
      old = to_host(self._score(self.policy_params(), *args)[0])
    ref = None if self.ref_params is None else to_host(self._score(self.ref_params, *args)[0])
    return sb.replace(old_logprobs=old, ref_logprobs=ref)

  def _score_rows(self, sb: StepBatch, rows: Sequence[int]) -> np.ndarray:
    """log pi_old of `rows` only, on a power-of-two count of rows (a few compiled shapes; the
    padding repeats the first row)."""
    n = 1
    while n < len(rows):
      n *= 2
    take = list(rows) + [rows[0]] * (n - len(rows))
    args = tuple(self._device(x[take]) for x in (sb.tokens, sb.positions, sb.attention_mask))
    return to_host(self._score(self.policy_params(), *args)[0])[:len(rows)]

  def _filter(self, sb: StepBatch, prompts: Sequence[Mapping], step: int) -> Optional[StepBatch]:
    """The rows the batch filter keeps (e.g. REX-RAG's trajectory filter over its clones,
    dynamic sampling's varied groups); None when it keeps none."""
    if self.batch_filter is None:
      return sb
    keep = [int(i) for i in self.batch_filter(self._context(step, sb, prompts),
                                              self.method_state)]
    return sb.select(keep) if keep else None

  def _generate(self, step: int) -> tuple[RolloutBatch, list, list, list, int]:
    """The step's rollouts and rewards: one batch of `trainer.batch_prompts` prompts, and more
    while a resampling batch filter (dynamic sampling's `shortfall`) wants groups, up to its
    `max_batches`.  Returns (batch, prompts, uids, reward results, generation batches)."""
    self.key, rk = jax.random.split(self.key)
    uids = self.cursor.take(self.tc.batch_prompts)
    prompts = [self.train_data[i] for i in uids]
    batch = self._rollout(self.engine, prompts, uids, self.rl.group_size, rk)
    results = self._rewards(batch, prompts, uids, step)
    short = getattr(self.batch_filter, "shortfall", None)
    gens = 1
    while short is not None and gens < self.batch_filter.max_batches:
      totals = [r.total for r in results]
      if short(batch.rows, totals, [prompts[r.prompt_index] for r in batch.rows]) == 0:
        break
      self.key, rk = jax.random.split(self.key)
      more = self.cursor.take(self.tc.batch_prompts)
      more_prompts = [self.train_data[i] for i in more]
      extra = self._rollout(self.engine, more_prompts, more, self.rl.group_size, rk)
      results = results + self._rewards(extra, more_prompts, more, step)
      batch = concat([batch, extra], [len(prompts), len(more_prompts)])
      prompts, uids = prompts + more_prompts, uids + more
      gens += 1
    return batch, prompts, uids, results, gens

  def _service_calls_since_last_step(self) -> dict:
    """Requests each service answered this step (e.g. the judge's)."""
    out = {}
    for name, service in self.services.items():
      if hasattr(service, "calls"):
        calls = int(service.calls)
        out[f"services/{name}/calls"] = float(calls - self._service_calls.get(name, 0))
        self._service_calls[name] = calls
    return out

  def _minibatch_rows(self, n: int) -> int:
    """Rows per update: rl.mini_batch_size, or the whole batch of n rounded up to a multiple of
    rl.micro_batch_size (ROW_MULTIPLE when unset)."""
    if self.rl.mini_batch_size:
      return self.rl.mini_batch_size
    unit = self.rl.micro_batch_size or ROW_MULTIPLE
    return -(-n // unit) * unit

  def _device(self, x):
    """A host [B, ...] array on the devices: global (rows over the batch axes) when the mesh
    spans processes, which every process then holds in full."""
    if not self.multiprocess:
      return jnp.asarray(x)
    return global_array(x, batch_sharding(self.mesh, np.ndim(x), np.shape(x)[0]))

  def _place(self, batch: TrainBatch) -> TrainBatch:
    if not self.multiprocess:
      return jax.device_put(batch, batch_shardings(batch, self.mesh))
    return jax.tree.map(lambda x, s: global_array(to_host(x), s), batch,
                        batch_shardings(batch, self.mesh))

  def _minibatches(self, batch: TrainBatch):
    """Consecutive mini-batches of `_minibatch_rows` rows; the last is filled up with rows that
    train on nothing (`pad_batch_rows`) when the row count does not divide, as with REX-RAG's
    kept clones: verl's short last mini-batch, at a fixed shape."""
    n = batch.tokens.shape[0]
    mb = self._minibatch_rows(n)
    batch = pad_batch_rows(batch, -(-n // mb) * mb)
    for s in range(0, batch.tokens.shape[0], mb):
      yield jax.tree.map(lambda x: x[s:s + mb], batch)

  def _num_micro(self, rows: int) -> int:
    mbs = self.rl.micro_batch_size or rows
    if rows % mbs:
      raise ValueError(f"mini-batch of {rows} does not split into micro-batches of {mbs} "
                       f"(rl.micro_batch_size)")
    return rows // mbs

  def _place_scalar(self, value, old):
    return global_array(value, old.sharding) if self.multiprocess else jax.device_put(
        value, old.sharding)

  def _set_learning_rates(self, step: int) -> dict:
    """RL step `step` (from 1) trains at schedule(step - 1), as verl's scheduler, stepped once
    after each RL step, gives (its first step runs at the warmup's 0)."""
    out = {}
    for name, optim in (("policy", self.run.optim), ("critic", self.run.critic_optim)):
      state = self.state if name == "policy" else self.critic
      if state is None or optim.clock != "rl_step":
        continue
      lr = float(learning_rate_schedule(optim)(step - 1))
      state = state.replace(opt_state=with_learning_rate(state.opt_state, lr, self._place_scalar))
      if name == "policy":
        self.state = state
      else:
        self.critic = state
      out[f"lr/{name}"] = lr
    return out

  def train_step(self, step: int) -> dict:
    t0 = time.perf_counter()
    lrs = self._set_learning_rates(step)
    batch, prompts, uids, results, gens = self._generate(step)
    t_roll = time.perf_counter() - t0
    train_batch, stats = self._build_batch(batch, prompts, uids, step, results)
    if gens > 1 or getattr(self.batch_filter, "max_batches", 1) > 1:
      stats["filter/generation_batches"] = gens
    self._merged = None        # the update below needs the memory, not the merged copy
    t1 = time.perf_counter()
    sums: dict = {}
    count = 0
    if train_batch is None:
      _log_line(f"step {step}: rl.batch_filter {self.rl.batch_filter!r} kept no row of "
                f"{stats['trajectories_generated']} (every group scored alike); no update")
    for _ in range(self.rl.ppo_epochs if train_batch is not None else 0):
      for mb in self._minibatches(train_batch):
        factor = 1.0
        if self.rl.skip_zero_advantage_rows:
          rows = mb.tokens.shape[0]
          mb, factor = rows_with_gradient(mb, self.rl.loss_agg, self.rl.loss_agg_rows,
                                          self.rl.micro_batch_size or ROW_MULTIPLE)
          # per optimiser update (averaged below with the update's metrics)
          sums["update/rows"] = sums.get("update/rows", 0.0) + mb.tokens.shape[0]
          sums["update/rows_skipped"] = sums.get("update/rows_skipped", 0.0) + (
              rows - mb.tokens.shape[0])
        if self.mesh is not None:
          mb = self._place(mb)
        nm = self._num_micro(mb.tokens.shape[0])
        frozen = () if self.frozen is None else (self.frozen,)
        self.state, m = self._update_fn("policy", mb, nm)(self.state, mb, *frozen)
        if factor != 1.0:     # the diagnostics as means over the rows trained
          m = {k: v * factor if k in ROW_MEANS else v for k, v in m.items()}
        if self.critic is not None:
          self.critic, cm = self._update_fn("critic", mb, nm)(self.critic, mb)
          m = {**m, **{f"critic/{k}": v for k, v in cm.items()}}
        m = jax.tree.map(to_host, m)
        bad = nonfinite_keys(m)
        if bad:
          last = self.ckpt.latest_step()
          raise NonFiniteError(
              f"non-finite {bad} in the update of step {step} (values "
              f"{ {k: float(m[k]) for k in bad} }); stopping without saving. Last good "
              f"checkpoint: step {last} in {self.ckpt.directory}/latest")
        for k, v in m.items():
          sums[k] = sums.get(k, 0.0) + float(v)
        count += 1
    t_upd = time.perf_counter() - t1
    total = time.perf_counter() - t0
    sums.pop("nonfinite_params", None)
    return {"step": step, **stats, **lrs, **{k: v / max(count, 1) for k, v in sums.items()},
            "time/rollout_s": batch.timings.get("rollout_s", t_roll),
            "time/retrieval_s": batch.timings.get("retrieval_s", 0.0),
            "time/retrieval_wait_s": batch.timings.get("retrieval_wait_s", 0.0),
            "time/update_s": t_upd, "time/step_s": total,
            "tokens_per_s": stats["tokens"] / max(total, 1e-9)}

  def _retrying(self, step: int, what: str, fn):
    """`fn()`, rerun from the same start (RNG key, data position, method state) when a service
    stayed down past its deadline, up to `trainer.step_retries` times.  Returns (result,
    reruns)."""
    key, cursor = self.key, self.cursor.state()
    method_state = copy.deepcopy(self.method_state)
    for attempt in range(self.tc.step_retries + 1):
      try:
        return fn(), attempt
      except ServiceUnavailable as e:
        if attempt == self.tc.step_retries:
          raise ServiceUnavailable(f"{what} of step {step}: {e}; gave up after {attempt + 1} "
                                   f"attempts (trainer.step_retries). Last checkpoint: step "
                                   f"{self.ckpt.latest_step()}") from e
        warnings.warn(f"{what} of step {step}: {e}; rerunning it ({attempt + 1} of "
                      f"{self.tc.step_retries})", stacklevel=2)
        self.key, self.method_state = key, copy.deepcopy(method_state)
        self.cursor = DataCursor(len(self.train_data), self.seed, **cursor)
    raise AssertionError("unreachable")

  # --- evaluation ------------------------------------------------------------------------
  def evaluate(self, step: int) -> dict:
    data = self.dev_data[:self.tc.eval_prompts or len(self.dev_data)]
    batch = self._rollout(self.eval_engine, data, list(range(len(data))), 1,
                          jax.random.PRNGKey(self.seed + 1))
    ans = [answer_metrics(row.answer, data[row.prompt_index]["golden_answers"])
           for row in batch.rows]
    return evaluation_metrics(ans, [record_source(data[row.prompt_index]) for row in batch.rows],
                              self.tc.eval_split)

  def final_params(self):
    """The run's policy: the best dev checkpoint when `trainer.keep_best`, else the last."""
    if self.tc.keep_best and self.ckpt.best_step() is not None:
      params, _ = self.ckpt.restore_best(self.state.params)
      return params if self.adapter is None else self._combine(params, self.frozen)
    return self.policy_params()

  # --- the loop --------------------------------------------------------------------------
  def train(self, on_checkpoint: Optional[Callable[[int], None]] = None) -> list[dict]:
    os.makedirs(self.workdir, exist_ok=True)
    start = self.maybe_resume()
    writer = None
    if self.tc.tensorboard and self.main:
      from tensorboardX import SummaryWriter
      writer = SummaryWriter(os.path.join(self.workdir, "tb"))
    bar = tqdm.tqdm(range(start + 1, self.tc.num_steps + 1), initial=start,
                    total=self.tc.num_steps, disable=not self.progress, desc="rl")
    try:
      for step in bar:
        metrics, reruns = self._retrying(step, "the update", lambda: self.train_step(step))
        metrics["step_retries"] = reruns
        if self.dev_data and self.tc.eval_every and step % self.tc.eval_every == 0:
          dev, _ = self._retrying(step, "the dev evaluation", lambda: self.evaluate(step))
          metrics.update(dev)
          self.ckpt.save_best(step, self.state.params, dev)
        self._log(metrics, writer)
        self.history.append(metrics)
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", kl=f"{metrics.get('kl', 0):.4f}")
        if step % self.tc.save_every == 0 or step == self.tc.num_steps:
          self._save(step)
          if on_checkpoint is not None:
            self.ckpt.wait()
            on_checkpoint(step)
    except OSError as e:           # the metrics log, a dump, TensorBoard: no room or rights
      if e.errno not in STORAGE_ERRNOS:
        raise
      last = self.ckpt.latest_step()
      raise StorageError(
          f"writing {e.filename or self.workdir} failed: {e.strerror}; "
          + (f"the last committed checkpoint, step {last}, is intact" if last is not None
             else "no checkpoint was committed yet")
          + "; the run stopped: make room and rerun the same command to resume") from e
    finally:
      self.ckpt.wait()
      if writer is not None:
        writer.close()
    return self.history
