"""Checkpoints against storage faults (issue 56, items 1 and 3), with real orbax checkpoints on
real filesystems: a disk that fills during a save (a 1 MiB tmpfs), and a file of the latest
checkpoint cut short."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from _fs_helpers import small_filesystem
from ragjax.errors import StorageError
from ragjax.rl.checkpoint import CheckpointDamagedError, Checkpointer, check_resume


def state(seed: int, n: int = 5000):
  r = np.random.RandomState(seed)   # random bytes: orbax's compression cannot shrink them
  return {"train": {"w": jnp.asarray(r.randn(n).astype(np.float32)),
                    "b": jnp.asarray(r.randn(7).astype(np.float32))}}


def same(a, b) -> bool:
  return all(np.array_equal(np.asarray(a["train"][k]), np.asarray(b["train"][k])) for k in "wb")


def test_a_full_disk_fails_the_save_at_once_and_keeps_the_committed_checkpoints(tmp_path):
  """The step-3 save meets a full disk: `save` raises a `StorageError` naming the directory,
  the cause and the room needed (before, the async save failed silently, the next step
  trained, and a traceback came minutes later); steps 1 and 2 stay committed and readable,
  the partial step is removed; once there is room the same checkpointer saves step 3."""
  with small_filesystem(str(tmp_path / "disk"), "1m") as disk:
    ckpt = Checkpointer(os.path.join(disk, "rl"), {"a": 1}, max_to_keep=2)
    for step in (1, 2):
      ckpt.save(step, state(step), {"step": step})
    filler = os.path.join(disk, "filler")
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:      # another writer fills the disk
      f.write(b"\0" * (free - 8192))
    with pytest.raises(StorageError) as e:
      ckpt.save(3, state(3), {"step": 3})
    msg = str(e.value)
    assert os.path.join(disk, "rl", "latest") in msg and "No space left on device" in msg, msg
    assert "needs about 19.6 KiB" in msg and "step 2, is intact" in msg, msg   # 5,007 floats
    assert sorted(os.listdir(os.path.join(disk, "rl", "latest"))) == ["1", "2"]
    got, extra = ckpt.restore(state(0), 2)
    assert same(got, state(2)) and extra["step"] == 2
    os.remove(filler)
    ckpt.save(3, state(3), {"step": 3})
    assert ckpt.latest_step() == 3 and same(ckpt.restore(state(0), 3)[0], state(3))
    ckpt.close()


def truncate_largest_file(step_dir: str) -> str:
  files = [os.path.join(d, f) for d, _, fs in os.walk(step_dir) for f in fs]
  path = max(files, key=os.path.getsize)
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 2)
  return path


def test_a_truncated_latest_checkpoint_resumes_from_the_newest_intact_one(tmp_path):
  """A file of step 2 cut short (before: `ValueError: OUT_OF_RANGE ... Error reading` and no
  fallback): step 2 is reported, set aside under damaged/, and step 1 restored; step 2 can be
  saved again.  With every kept step damaged: one error naming each."""
  d = str(tmp_path / "rl")
  ckpt = Checkpointer(d, {"a": 1}, max_to_keep=2)
  for step in (1, 2):
    ckpt.save(step, state(step), {"step": step})
  truncate_largest_file(os.path.join(d, "latest", "2"))
  with open(os.path.join(d, "latest", "2", "meta", "metadata"), "r+b") as f:
    f.truncate(10)                                  # its JSON part cut too
  assert check_resume(d, {"a": 1}) == 1             # the check before any work skips it
  said = []
  step, got, extra = ckpt.restore_intact(state(0), log=said.append)
  assert step == 1 and extra["step"] == 1 and same(got, state(1))
  assert len(said) == 1 and "step 2" in said[0] and "damaged" in said[0], said
  assert os.path.isdir(os.path.join(d, "damaged", "2")) and ckpt.latest_step() == 1
  ckpt.save(2, state(2), {"step": 2})            # the resumed run saves step 2 again
  ckpt.close()
  ckpt = Checkpointer(d, {"a": 1}, max_to_keep=2)   # a later process finds it whole
  assert ckpt.restore_intact(state(0), log=said.append)[0] == 2
  for step in (1, 2):
    truncate_largest_file(os.path.join(d, "latest", str(step)))
  with pytest.raises(CheckpointDamagedError, match=r"no intact checkpoint in .*step 2: .*step 1: "):
    ckpt.restore_intact(state(0), log=said.append)
  ckpt.close()


def test_no_intact_checkpoint_is_one_short_line_and_no_traceback(tmp_path):
  """Issue 65: with both kept steps cut short, the process that resumes says one `error:`
  line naming each step's fault without TensorStore's spec (before: a 1,500-character line),
  and the failed reads TensorStore finishes after orbax closed their event loop print no
  `RuntimeError: Event loop is closed` (before: one run in three printed them)."""
  import subprocess
  import sys
  d = str(tmp_path / "rl")
  ckpt = Checkpointer(d, {"a": 1}, max_to_keep=2)
  for step in (1, 2):
    ckpt.save(step, state(step), {"step": step})
  ckpt.close()
  for step in (1, 2):
    truncate_largest_file(os.path.join(d, "latest", str(step)))
  tests = os.path.dirname(os.path.abspath(__file__))
  code = ("import sys; from test_rl_checkpoint_faults import state; "
          "from ragjax.rl.checkpoint import Checkpointer; "
          "from ragjax.errors import exit_on_user_error\n"
          f"with exit_on_user_error('resume'):\n"
          f"  Checkpointer({d!r}, {{'a': 1}}, max_to_keep=2).restore_intact(state(0))\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.path.dirname(tests)]),
             JAX_PLATFORMS="cpu")
  env.pop("RAGJAX_TRACEBACK", None)
  p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                     timeout=300)
  err = p.stdout + p.stderr
  lines = [l for l in err.splitlines() if "error:" in l]
  assert p.returncode == 2 and len(lines) == 1, err[-3000:]
  assert "step 2: " in lines[0] and "step 1: " in lines[0] and len(lines[0]) < 600, lines[0]
  assert "TensorStore(" not in err and "Traceback" not in err and "Event loop" not in err, err


def test_a_field_added_since_the_checkpoint_matches_only_at_its_old_behaviour():
  from ragjax.rl.checkpoint import fingerprint_diff
  saved = {"rl.kl_coef": 0.0}                      # written before traces.* existed
  assert fingerprint_diff(saved, {"rl.kl_coef": 0.0, "traces.second_search": False,
                                  "traces.answer_think": "names"}) == []
  assert fingerprint_diff(saved, {"rl.kl_coef": 0.0, "traces.second_search": True}) == [
      "traces.second_search: checkpoint=False now=True"]
  # a field not in ADDED_FIELDS still differs when one side lacks it
  assert fingerprint_diff(saved, {"rl.kl_coef": 0.0, "rl.new": 1}) == [
      "rl.new: checkpoint='<absent>' now=1"]
