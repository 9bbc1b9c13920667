"""Orbax checkpoints that resume a run exactly, and refuse a checkpoint from another config.

A checkpoint holds the train state (params, optimizer state, step), the critic state for PPO,
the RNG key, and a JSON part: data position, method state (REX-RAG keep-ratio history, UR^2
curriculum, ...), the last metrics and a config fingerprint.  Restoring under a config whose
fingerprint differs raises `ConfigMismatchError` naming every differing field.  Best-by-dev
params live in a separate manager under `best/` so keep-best never deletes the resume point.

Storage faults: a save is waited for, so a full disk or read-only filesystem is a
`StorageError` (one line: the directory, the room needed and free) before another step
trains, the committed checkpoints intact; a committed step that no longer reads back (a file
cut short) is set aside under `damaged/` and the next older one restored (`restore_intact`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from typing import Any, Mapping, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization

from ragjax.errors import STORAGE_ERRNOS, StorageError
from ragjax.rl.run_config import ADDED_FIELDS, resume_mutable
from ragjax.typed_config import json_safe


class ConfigMismatchError(ValueError):
  pass


class CheckpointDamagedError(ValueError):
  """No committed checkpoint of a run could be read back (each step's cause named)."""


DAMAGED_DIR = "damaged"         # where a step that could not be read back is moved, kept


def fingerprint_diff(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
  """Human-readable differences between two flattened configs, fields a resume may change
  (`RESUME_MUTABLE`) left out on both sides (a checkpoint written before a field became
  mutable still resumes); a field in `ADDED_FIELDS` that one side lacks counts as its value
  there (a checkpoint written before the field existed)."""
  saved, current = ({k: v for k, v in json_safe(dict(d)).items() if not resume_mutable(k)}
                    for d in (saved, current))
  out = []
  for k in sorted(set(saved) | set(current)):
    absent = ADDED_FIELDS.get(k, "<absent>")
    a, b = saved.get(k, absent), current.get(k, absent)
    if a != b:
      out.append(f"{k}: checkpoint={a!r} now={b!r}")
  return out


def check_resume(directory: str, fingerprint: Mapping[str, Any]) -> Optional[int]:
  """The step a run in `directory` would resume from (None when it has no checkpoint), after
  checking that checkpoint's config fingerprint against `fingerprint`: `ConfigMismatchError`
  naming every differing field.  Recipes call it before any data, index or model work, so a
  changed config is refused in seconds, not after the set-up (the trainer checks again when it
  restores).  A step whose metadata does not read back is skipped here: the trainer reports it
  and sets it aside."""
  if not os.path.isdir(os.path.join(os.path.abspath(directory), "latest")):
    return None
  ckpt = Checkpointer(directory, fingerprint)
  try:
    for step in ckpt.steps():
      try:
        ckpt.check_fingerprint(step)
        return step
      except ConfigMismatchError:
        raise
      except Exception:  # noqa: BLE001  (a damaged step: the trainer reports and sets it aside)
        continue
    return None
  finally:
    ckpt.close()


def _size(n: float) -> str:
  for unit in ("bytes", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB":
      return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
    n /= 1024


def is_storage_failure(e: BaseException) -> bool:
  """A write that failed for want of room or rights: an OSError with such an errno, or
  tensorstore's `RESOURCE_EXHAUSTED` / `PERMISSION_DENIED` as orbax re-raises it."""
  while e is not None:
    if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
      return True
    text = str(e)
    if any(m in text for m in ("No space left on device", "Read-only file system",
                               "Disk quota exceeded", "RESOURCE_EXHAUSTED: Error writing",
                               "PERMISSION_DENIED")):
      return True
    e = e.__cause__ or e.__context__
  return False


class _DropOrbaxErrors(logging.Filter):
  def filter(self, record):
    return not (record.levelno >= logging.ERROR and "orbax" in record.pathname)


@contextlib.contextmanager
def _orbax_errors_quiet():
  """Orbax logs a failed background write as several tracebacks before it re-raises it; the
  save reports it once (`RAGJAX_TRACEBACK=1` keeps orbax's logs)."""
  if os.environ.get("RAGJAX_TRACEBACK"):
    yield
    return
  quiet = _DropOrbaxErrors()
  loggers = [logging.getLogger("absl"), logging.getLogger()]
  for lg in loggers:
    lg.addFilter(quiet)
  handlers = [h for lg in loggers for h in lg.handlers]
  for h in handlers:
    h.addFilter(quiet)
  try:
    yield
  finally:
    for x in loggers + handlers:
      x.removeFilter(quiet)


def _quiet_failed_reads() -> None:
  """A failed restore leaves orbax's read coroutines holding exceptions nobody retrieves;
  whenever they are collected (later, on orbax's own schedule) Python prints each as
  `Exception ignored in: <coroutine …>` with a traceback, though the restore's own error has
  said it once.  From the first failed restore on, those (and only those: any other
  unraisable exception still reaches the hook) are dropped, with TensorStore's late read
  callbacks (see `_late_read_callback`); `RAGJAX_TRACEBACK=1` keeps them."""
  import inspect
  import sys
  if os.environ.get("RAGJAX_TRACEBACK") or getattr(sys.unraisablehook, "_ragjax", False):
    return
  previous, previous_except = sys.unraisablehook, sys.excepthook

  def hook(u):
    code = getattr(u.object, "cr_code", None) if inspect.iscoroutine(u.object) else None
    if code is not None and "orbax" in code.co_filename:
      return
    # the same late read callbacks as below, when TensorStore reports them as unraisable
    # (no object: Python prints a bare traceback)
    if u.object is None and _late_read_callback(u.exc_type, u.exc_value, u.exc_traceback):
      return
    previous(u)

  def excepthook(kind, value, tb):
    # TensorStore's reads of the failed restore finish after orbax closed their event loop:
    # their callbacks' `call_soon_threadsafe` raises `Event loop is closed`, printed through
    # sys.excepthook from TensorStore's threads, one traceback per read.
    if not _late_read_callback(kind, value, tb):
      previous_except(kind, value, tb)
  hook._ragjax = True
  sys.unraisablehook = hook
  sys.excepthook = excepthook


def _quiet_reads_at_exit() -> None:
  """No checkpoint read back, so the run is about to stop with one line, while TensorStore may
  still finish the failed reads: at interpreter shutdown (after `sys.excepthook` is gone) each
  would print its `Event loop is closed` traceback.  From the exit handlers on, stderr goes to
  /dev/null; everything the run says is said by then (`RAGJAX_TRACEBACK=1` keeps it)."""
  import atexit
  import sys
  if os.environ.get("RAGJAX_TRACEBACK"):
    return

  def quiet():
    try:
      sys.stderr.flush()
      os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    except (OSError, ValueError):
      pass
  atexit.register(quiet)


def _late_read_callback(kind, value, tb) -> bool:
  """`RuntimeError('Event loop is closed')` raised in asyncio's `call_soon_threadsafe` as the
  outermost frame: a callback into a closed loop, not a failure of ragjax's own code."""
  return (kind is RuntimeError and str(value) == "Event loop is closed" and tb is not None
          and tb.tb_frame.f_code.co_name == "call_soon_threadsafe"
          and "asyncio" in tb.tb_frame.f_code.co_filename)


def short_cause(e: BaseException) -> str:
  """One short line for a restore's error: TensorStore's messages end with the whole store's
  spec (`See full TensorStore details: <bound method ... TensorStore({...`), dropped here."""
  text = " ".join(str(e).split())
  text = text.split(" See full TensorStore details")[0]
  return (text[:200] + ("..." if len(text) > 200 else "")) or type(e).__name__


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

  def steps(self) -> list[int]:
    """The committed steps, newest first."""
    return sorted(self._mngr.all_steps(), reverse=True)

  def save(self, step: int, state: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    """`state`: pytree of arrays (train state, critic, rng); `extra`: JSON-able host state.

    Waits until the step is committed, so a save that fails (a full disk, a read-only
    filesystem) is a `StorageError` now, before another step trains, naming the directory and
    the room needed; its partial files are removed and the checkpoints committed before it
    (which orbax deletes only after a commit) stay as they were."""
    meta = {"fingerprint": self.fingerprint, "extra": json_safe(dict(extra))}
    state_dict = serialization.to_state_dict(state)
    try:
      with _orbax_errors_quiet():
        self._mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state_dict), meta=ocp.args.JsonSave(meta)))
        self._mngr.wait_until_finished()
    except Exception as e:  # noqa: BLE001  (a storage failure is named; anything else re-raised)
      if not is_storage_failure(e):
        raise
      raise self._save_failed(step, state_dict, e) from e

  def _save_failed(self, step: int, state_dict, e: BaseException) -> StorageError:
    latest = os.path.join(self.directory, "latest")
    if jax.process_index() == 0 and os.path.isdir(latest):   # the uncommitted step's files
      for name in os.listdir(latest):
        if name.startswith(f"{step}.orbax-checkpoint-tmp"):
          shutil.rmtree(os.path.join(latest, name), ignore_errors=True)
    need = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state_dict))
    try:
      free = f"{_size(shutil.disk_usage(latest).free)} free there"
    except OSError:
      free = "free space unknown"
    committed = self._mngr.all_steps()
    last = (f"the last committed checkpoint, step {max(committed)}, is intact" if committed
            else "no checkpoint was committed yet")
    cause = " ".join(str(e).split())
    cause = next((m for m in ("No space left on device", "Read-only file system",
                              "Disk quota exceeded", "Permission denied") if m in cause),
                 cause[:200])
    return StorageError(
        f"saving checkpoint step {step} to {latest} failed: {cause} (a checkpoint needs about "
        f"{_size(need)}; {free}); {last}; the run stopped: make room and rerun the "
        f"same command to resume")

  def check_fingerprint(self, step: int) -> dict:
    meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    diff = fingerprint_diff(meta["fingerprint"], self.fingerprint)
    if diff:
      raise ConfigMismatchError(
          f"checkpoint {self.directory}/latest/{step} was written with a different config; "
          f"mismatched field(s): " + "; ".join(diff))
    return meta

  def restore_intact(self, target: Mapping[str, Any], log=print):
    """(step, state, extra) of the newest committed checkpoint that reads back whole; (None,
    None, None) when there is none.  A step that fails to read (a truncated or missing file:
    a disk fault, a partial copy) is reported, moved to `<directory>/damaged/<step>` (kept for
    a look, out of the way of the step's next save) and the next older kept step is tried; a
    checkpoint of another config is refused as ever (`ConfigMismatchError`).  None readable:
    `CheckpointDamagedError` naming each step and its fault."""
    faults = []
    for step in self.steps():
      try:
        state, extra = self.restore(target, step)
        return step, state, extra
      except ConfigMismatchError:
        raise
      except Exception as e:  # noqa: BLE001  (any read fault of a committed step is damage)
        _quiet_failed_reads()
        cause = short_cause(e)
        faults.append(f"step {step}: {cause}")
        log(f"checkpoint step {step} in {self.directory}/latest is damaged ({cause}); moved "
            f"to {self.directory}/{DAMAGED_DIR}/{step}; trying the next older one")
        self._set_aside(step)
    if faults:
      _quiet_reads_at_exit()
      raise CheckpointDamagedError(
          f"no intact checkpoint in {self.directory}/latest (moved to "
          f"{self.directory}/{DAMAGED_DIR}/): " + "; ".join(faults) + "; delete "
          f"{self.directory} to start the run afresh")
    return None, None, None

  def _set_aside(self, step: int) -> None:
    if jax.process_index() == 0:
      aside = os.path.join(self.directory, DAMAGED_DIR)
      os.makedirs(aside, exist_ok=True)
      dest = os.path.join(aside, str(step))
      if os.path.exists(dest):
        shutil.rmtree(dest)
      os.replace(os.path.join(self.directory, "latest", str(step)), dest)
    self._mngr.reload()

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
