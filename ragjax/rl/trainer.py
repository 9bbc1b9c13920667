"""The RL loop: data -> rollout -> rewards -> advantages -> update, with evaluation, metrics,
exact-resume checkpoints, keep-best by dev score and a NaN/Inf guard.

The rollout is injected (`rollout_fn(params, prompts, rng) -> Trajectories`-like object), so
this module depends on nothing above ragjax.rl.  Every step is a deterministic function of
(params, optimizer state, RNG key, data position, method state), all of which are checkpointed,
so a run killed at any point resumes to the same params and metrics.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from ragjax.models.config import DecoderConfig
from ragjax.rl import advantages as adv_lib
from ragjax.rl.batch import LABELS, TrainBatch, loss_mask_from_labels, make_train_batch
from ragjax.rl.checkpoint import Checkpointer
from ragjax.rl.config import RunConfig
from ragjax.rl.logprobs import sequence_logprobs, sequence_values
from ragjax.rl.losses import kl_penalty
from ragjax.rl.optim import make_optimizer
from ragjax.rl.rewards import combine_rewards, cover_exact_match, exact_match, last_answer, token_f1
from ragjax.rl.train_step import (TrainState, init_train_state, jit_update, make_update,
                                  policy_loss_fn, value_loss_fn)


class NonFiniteError(FloatingPointError):
  pass


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


def answer_metrics(response: str, golden) -> dict[str, float]:
  ans = last_answer(response, None)
  if ans is None:
    return {"em": 0.0, "f1": 0.0, "cover_em": 0.0}
  return {"em": exact_match(ans, golden), "f1": token_f1(ans, golden),
          "cover_em": cover_exact_match(ans, golden)}


def _finite(metrics: Mapping[str, float]) -> list[str]:
  return [k for k, v in metrics.items() if not math.isfinite(float(v))]


class Trainer:
  """Runs `run.trainer.num_steps` RL steps from `workdir`, resuming if a checkpoint exists."""

  def __init__(self, *, model_cfg: DecoderConfig, run: RunConfig, params,
               rollout_fn: Callable, train_data: Sequence[Mapping[str, Any]],
               fingerprint: Mapping[str, Any], dev_data: Optional[Sequence[Mapping]] = None,
               eval_rollout_fn: Optional[Callable] = None, critic_params=None,
               ref_params=None, behaviour_fn: Optional[Callable] = None, mesh=None):
    self.cfg, self.run = model_cfg, run
    self.rl, self.tc = run.rl, run.trainer
    self.rollout_fn, self.eval_rollout_fn = rollout_fn, eval_rollout_fn or rollout_fn
    self.train_data, self.dev_data = list(train_data), list(dev_data or [])
    for i, ex in enumerate(self.train_data):
      for field in ("question", "golden_answers"):
        if field not in ex:
          raise ValueError(f"training record {i} has no {field!r} field (keys: {sorted(ex)})")
    self.behaviour_fn, self.mesh = behaviour_fn, mesh
    self.method_state: dict = {}
    self.optimizer = make_optimizer(run.optim)
    self.state = init_train_state(params, self.optimizer)
    self.ref_params = None
    if self.rl.needs_reference:   # the frozen reference is skipped when kl_coef == 0
      self.ref_params = ref_params if ref_params is not None else jax.tree.map(jnp.copy, params)
    self.critic = None
    if self.rl.uses_critic:
      if critic_params is None:
        raise ValueError("rl.advantage='gae' needs critic_params (a Decoder with head='value')")
      self.critic_optimizer = make_optimizer(run.critic_optim)
      self.critic = init_train_state(critic_params, self.critic_optimizer)
    self.key = jax.random.PRNGKey(self.tc.seed)
    self.cursor = DataCursor(len(self.train_data), self.tc.seed)
    self.ckpt = Checkpointer(self.tc.workdir, fingerprint, self.tc.max_to_keep,
                             best_metric=self.tc.keep_best_metric if self.dev_data else None)
    self._score = jax.jit(lambda p, t, q, a: sequence_logprobs(
        self.cfg, p, t, q, a, chunk=self.rl.logprob_chunk, temperature=self.rl.temperature))
    self._values = jax.jit(lambda p, t, q, a: sequence_values(self.cfg, p, t, q, a))
    self._updates: dict = {}
    self.history: list[dict] = []

  # --- checkpoint ------------------------------------------------------------------------
  def _ckpt_tree(self):
    tree = {"train": self.state, "rng": self.key}
    if self.critic is not None:
      tree["critic"] = self.critic
    return tree

  def maybe_resume(self) -> int:
    step = self.ckpt.latest_step()
    if step is None:
      return 0
    tree, extra = self.ckpt.restore(self._ckpt_tree(), step)
    self.state, self.key = tree["train"], tree["rng"]
    self.critic = tree.get("critic", self.critic)
    self.cursor = DataCursor(len(self.train_data), self.tc.seed, **extra["data_position"])
    self.method_state = dict(extra.get("method_state", {}))
    self._truncate_log(step)
    return step

  def _save(self, step: int):
    self.ckpt.save(step, self._ckpt_tree(), {"data_position": self.cursor.state(),
                                            "method_state": self.method_state, "step": step})

  # --- logging ---------------------------------------------------------------------------
  @property
  def log_path(self):
    return os.path.join(self.tc.workdir, "metrics.jsonl")

  def _truncate_log(self, step: int):
    """Drop log lines past the resumed step, so the log reads as one uninterrupted run."""
    if not os.path.exists(self.log_path):
      return
    with open(self.log_path) as f:
      keep = [l for l in f if l.strip() and json.loads(l)["step"] <= step]
    with open(self.log_path, "w") as f:
      f.writelines(keep)

  def _log(self, metrics: dict, writer):
    with open(self.log_path, "a") as f:
      f.write(json.dumps(metrics, sort_keys=True) + "\n")
    if writer is not None:
      for k, v in metrics.items():
        if k != "step" and isinstance(v, (int, float)):
          writer.add_scalar(k, v, metrics["step"])

  # --- one step --------------------------------------------------------------------------
  def _update_fn(self, kind: str, batch, num_micro: int):
    key = (kind, jax.tree.map(lambda x: x.shape, batch), num_micro)
    if key not in self._updates:
      if kind == "policy":
        loss_fn, denom = policy_loss_fn(self.cfg, self.rl)
        opt, state = self.optimizer, self.state
      else:
        loss_fn, denom = value_loss_fn(self.cfg, self.rl)
        opt, state = self.critic_optimizer, self.critic
      self._updates[key] = jit_update(make_update(loss_fn, denom, opt, num_micro), state, batch,
                                      self.mesh)
    return self._updates[key]

  def _expand(self, indices: Sequence[int]) -> list[dict]:
    out = []
    for i in indices:
      ex = self.train_data[i]
      uid = ex.get("uid", ex.get("id", i))
      out.extend(dict(ex, uid=uid) for _ in range(self.rl.group_size))
    return out

  def _build_batch(self, traj, prompts) -> tuple[TrainBatch, dict]:
    tokens, labels = np.asarray(traj.tokens), np.asarray(traj.labels)
    n = tokens.shape[0]
    if n != len(prompts):
      raise ValueError(f"rollout returned {n} trajectories for {len(prompts)} prompts")
    results = [combine_rewards(self.rl.rewards, traj.response_text[i], prompts[i]["golden_answers"],
                               traj.metadata[i], self.rl.reward_kwargs,
                               record=str(prompts[i].get("id", prompts[i]["uid"])))
               for i in range(n)]
    rewards = np.asarray([r.total for r in results], np.float32)
    mask = loss_mask_from_labels(labels, self.rl.train_on)
    attn = (labels != LABELS["padding"]).astype(np.int32)
    pos = np.maximum(np.cumsum(attn, 1) - 1, 0).astype(np.int32)
    args = (jnp.asarray(tokens), jnp.asarray(pos), jnp.asarray(attn))
    if self.rl.use_sampler_logprobs:
      old = np.asarray(traj.sampler_logprobs, np.float32)
    else:
      old = np.asarray(self._score(self.state.params, *args)[0])
    ref = None if self.ref_params is None else np.asarray(self._score(self.ref_params, *args)[0])
    returns = values = None
    if self.rl.uses_critic:
      values = np.asarray(self._values(self.critic.params, *args))
      token_r = adv_lib.place_outcome_rewards(rewards, mask)
      if self.rl.kl_in_reward and ref is not None:
        token_r = token_r - self.rl.kl_coef * np.asarray(
            kl_penalty(jnp.asarray(old), jnp.asarray(ref), "k1")) * mask
      a, ret = adv_lib.gae(jnp.asarray(token_r), jnp.asarray(values), jnp.asarray(mask),
                           self.rl.gamma, self.rl.lam)
      advantages, returns = np.asarray(a), np.asarray(ret)
    else:
      advantages = adv_lib.outcome_advantages(self.rl.advantage, rewards, traj.group_id, mask,
                                              eps=self.rl.adv_eps)
    behaviour = None
    if self.behaviour_fn is not None:   # e.g. REX-RAG's mixture mu over clones
      behaviour = self.behaviour_fn(traj, old, self.method_state)
    batch = make_train_batch(tokens, labels, advantages, old, train_on=self.rl.train_on,
                             behaviour_logprobs=behaviour,
                             ref_logprobs=ref if not self.rl.kl_in_reward else None,
                             returns=returns, old_values=values, gather=self.rl.gather)
    ans = [answer_metrics(traj.response_text[i], prompts[i]["golden_answers"]) for i in range(n)]
    searches = [m.get("num_searches", len(m.get("queries", []))) for m in traj.metadata]
    stats = {"reward": float(rewards.mean()), "reward_std": float(rewards.std()),
             "em": float(np.mean([a["em"] for a in ans])),
             "f1": float(np.mean([a["f1"] for a in ans])),
             "response_length": float((labels == LABELS["policy"]).sum(1).mean()),
             "searches_per_traj": float(np.mean(searches)),
             "tokens": int(attn.sum())}
    for name in self.rl.rewards:
      stats[f"reward/{name}"] = float(np.mean([r.components[name] for r in results]))
    return batch, stats

  def _minibatches(self, batch: TrainBatch):
    n = batch.tokens.shape[0]
    mb = self.rl.mini_batch_size or n
    if n % mb:
      raise ValueError(f"{n} trajectories do not split into mini-batches of {mb} "
                       f"(rl.mini_batch_size)")
    for s in range(0, n, mb):
      yield jax.tree.map(lambda x: x[s:s + mb], batch)

  def _num_micro(self, rows: int) -> int:
    mbs = self.rl.micro_batch_size or rows
    if rows % mbs:
      raise ValueError(f"mini-batch of {rows} does not split into micro-batches of {mbs} "
                       f"(rl.micro_batch_size)")
    return rows // mbs

  def train_step(self, step: int) -> dict:
    t0 = time.perf_counter()
    self.key, rk = jax.random.split(self.key)
    prompts = self._expand(self.cursor.take(self.tc.batch_prompts))
    traj = self.rollout_fn(self.state.params, prompts, rk)
    t_roll = time.perf_counter() - t0
    batch, stats = self._build_batch(traj, prompts)
    t1 = time.perf_counter()
    sums: dict = {}
    count = 0
    for _ in range(self.rl.ppo_epochs):
      for mb in self._minibatches(batch):
        if self.mesh is not None:
          from ragjax.rl.train_step import batch_shardings
          mb = jax.device_put(mb, batch_shardings(mb, self.mesh))
        nm = self._num_micro(mb.tokens.shape[0])
        self.state, m = self._update_fn("policy", mb, nm)(self.state, mb)
        if self.critic is not None:
          self.critic, cm = self._update_fn("critic", mb, nm)(self.critic, mb)
          m = {**m, **{f"critic/{k}": v for k, v in cm.items()}}
        m = jax.device_get(m)
        bad = _finite(m)
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
    metrics = {"step": step, **stats, **{k: v / count for k, v in sums.items()},
               "time/rollout_s": traj.timings.get("rollout_s", t_roll),
               "time/retrieval_s": traj.timings.get("retrieval_s", 0.0),
               "time/update_s": t_upd, "time/step_s": total,
               "tokens_per_s": stats["tokens"] / max(total, 1e-9)}
    return metrics

  # --- evaluation ------------------------------------------------------------------------
  def evaluate(self, step: int) -> dict:
    data = self.dev_data[:self.tc.eval_prompts or len(self.dev_data)]
    prompts = [dict(ex, uid=ex.get("uid", ex.get("id", i))) for i, ex in enumerate(data)]
    traj = self.eval_rollout_fn(self.state.params, prompts, jax.random.PRNGKey(self.tc.seed + 1))
    ans = [answer_metrics(traj.response_text[i], p["golden_answers"]) for i, p in enumerate(prompts)]
    return {f"dev/{k}": float(np.mean([a[k] for a in ans])) for k in ("em", "f1", "cover_em")}

  # --- the loop --------------------------------------------------------------------------
  def train(self, on_checkpoint: Optional[Callable[[int], None]] = None) -> list[dict]:
    os.makedirs(self.tc.workdir, exist_ok=True)
    start = self.maybe_resume()
    writer = None
    if self.tc.tensorboard:
      from tensorboardX import SummaryWriter
      writer = SummaryWriter(os.path.join(self.tc.workdir, "tb"))
    bar = tqdm.tqdm(range(start + 1, self.tc.num_steps + 1), initial=start,
                    total=self.tc.num_steps, disable=not self.tc.progress, desc="rl")
    try:
      for step in bar:
        metrics = self.train_step(step)
        if self.dev_data and self.tc.eval_every and step % self.tc.eval_every == 0:
          dev = self.evaluate(step)
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
    finally:
      self.ckpt.wait()
      if writer is not None:
        writer.close()
    return self.history
