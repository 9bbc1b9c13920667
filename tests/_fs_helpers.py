"""Small real filesystems for fault tests: a tmpfs of a few hundred KiB (a full disk) or a
read-only one, mounted where this process may mount (root in the sandbox); else a directory
made read-only by its mode, where that binds (not for root)."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest


def _mount(directory: str, options: str) -> bool:
  os.makedirs(directory, exist_ok=True)
  try:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", directory],
                       capture_output=True, text=True, timeout=20)
  except (OSError, subprocess.TimeoutExpired):
    return False
  return r.returncode == 0


def _umount(directory: str) -> None:
  subprocess.run(["umount", "-l", directory], capture_output=True, timeout=20)


@contextlib.contextmanager
def small_filesystem(directory: str, size: str = "1m"):
  """`directory` as a tmpfs of `size` (a disk that fills); skips when mounting is refused."""
  if not _mount(directory, f"size={size}"):
    pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
  try:
    yield directory
  finally:
    _umount(directory)


@contextlib.contextmanager
def read_only_directory(directory: str):
  """`directory` on a read-only tmpfs, else (not root) a directory of mode 0555; skips where
  neither makes it unwritable."""
  if _mount(directory, "ro,size=64k"):
    try:
      yield directory
    finally:
      _umount(directory)
    return
  os.makedirs(directory, exist_ok=True)
  os.chmod(directory, 0o555)
  try:
    probe = os.path.join(directory, ".probe")
    try:
      open(probe, "w").close()
      os.remove(probe)
      pytest.skip("neither a read-only mount nor mode 0555 stops this process writing (root "
                  "without mount rights)")
    except OSError:
      pass
    yield directory
  finally:
    os.chmod(directory, 0o755)
