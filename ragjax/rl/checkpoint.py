"""Orbax checkpoints that resume a run exactly, and refuse a checkpoint from another config.

A checkpoint holds the train state (params, optimizer state, step), the critic state for PPO,
the RNG key, and a JSON part: data position, method state (REX-RAG keep-ratio history, UR^2
curriculum, ...), the last metrics and a config fingerprint.  Restoring under a config whose
fingerprint differs raises `ConfigMismatchError` naming every differing field.  Best-by-dev
params live in a separate manager under `best/` so keep-best never deletes the resume point.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization

from ragjax.rl.config import resume_mutable
from ragjax.typed_config import json_safe


class ConfigMismatchError(ValueError):
  pass


def fingerprint_diff(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
  """Human-readable differences between two flattened configs, fields a resume may change
  (`RESUME_MUTABLE`) left out on both sides (a checkpoint written before a field became
  mutable still resumes)."""
  saved, current = ({k: v for k, v in json_safe(dict(d)).items() if not resume_mutable(k)}
                    for d in (saved, current))
  out = []
  for k in sorted(set(saved) | set(current)):
    a, b = saved.get(k, "<absent>"), current.get(k, "<absent>")
    if a != b:
      out.append(f"{k}: checkpoint={a!r} now={b!r}")
  return out


def check_resume(directory: str, fingerprint: Mapping[str, Any]) -> Optional[int]:
  """The step a run in `directory` would resume from (None when it has no checkpoint), after
  checking that checkpoint's config fingerprint against `fingerprint`: `ConfigMismatchError`
  naming every differing field.  Recipes call it before any data, index or model work, so a
  changed config is refused in seconds, not after the set-up (the trainer checks again when it
  restores)."""
  if not os.path.isdir(os.path.join(os.path.abspath(directory), "latest")):
    return None
  ckpt = Checkpointer(directory, fingerprint)
  try:
    step = ckpt.latest_step()
    if step is not None:
      ckpt.check_fingerprint(step)
    return step
  finally:
    ckpt.close()


class Checkpointer:
  """Latest-N checkpoints for resuming, plus the best params by a dev metric."""

  def __init__(self, directory: str, fingerprint: Mapping[str, Any], max_to_keep: int = 2,
               best_metric: Optional[str] = None, best_mode: str = "max"):
    self.directory = os.path.abspath(directory)
    self.fingerprint = json_safe(dict(fingerprint))
    self.best_metric = best_metric
    self._mngr = ocp.CheckpointManager(
        os.path.join(self.directory, "latest"),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))
    self._best = None
    if best_metric:
      self._best = ocp.CheckpointManager(
          os.path.join(self.directory, "best"),
          options=ocp.CheckpointManagerOptions(
              max_to_keep=1, create=True, best_fn=lambda m: m[best_metric], best_mode=best_mode,
              keep_checkpoints_without_metrics=False))

  # --- latest ---------------------------------------------------------------------------
  def latest_step(self) -> Optional[int]:
    return self._mngr.latest_step()

  def save(self, step: int, state: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    """`state`: pytree of arrays (train state, critic, rng); `extra`: JSON-able host state."""
    meta = {"fingerprint": self.fingerprint, "extra": json_safe(dict(extra))}
    self._mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(serialization.to_state_dict(state)),
        meta=ocp.args.JsonSave(meta)))

  def check_fingerprint(self, step: int) -> dict:
    meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    diff = fingerprint_diff(meta["fingerprint"], self.fingerprint)
    if diff:
      raise ConfigMismatchError(
          f"checkpoint {self.directory}/latest/{step} was written with a different config; "
          f"mismatched field(s): " + "; ".join(diff))
    return meta

  def restore(self, target: Mapping[str, Any], step: Optional[int] = None):
    """Returns (state like `target`, placed with target's shardings; extra dict)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint under {self.directory}/latest")
    meta = self.check_fingerprint(step)
    target_sd = serialization.to_state_dict(target)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_sd)
    restored = self._mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract)))["state"]
    return serialization.from_state_dict(target, restored), meta["extra"]

  # --- best -----------------------------------------------------------------------------
  def save_best(self, step: int, params, metrics: Mapping[str, float]) -> None:
    if self._best is None:
      return
    value = metrics.get(self.best_metric)
    if value is None or not np.isfinite(value):
      raise ValueError(f"keep-best metric {self.best_metric!r} missing or non-finite in {sorted(metrics)}")
    self._best.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(params), meta=ocp.args.JsonSave(
            {"fingerprint": self.fingerprint, "metrics": json_safe(dict(metrics))})),
        metrics={k: float(v) for k, v in metrics.items()})

  def best_step(self) -> Optional[int]:
    return None if self._best is None else self._best.best_step()

  def restore_best(self, target_params):
    step = self.best_step()
    if step is None:
      raise FileNotFoundError(f"no best checkpoint under {self.directory}/best")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_params)
    out = self._best.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return out["params"], out["meta"]

  def wait(self) -> None:
    self._mngr.wait_until_finished()
    if self._best is not None:
      self._best.wait_until_finished()

  def close(self) -> None:
    self._mngr.close()
    if self._best is not None:
      self._best.close()
