"""Cached attention on XLA's CPU backend through a C++ kernel (`cpu_attention.cc`, jax.ffi).

A decode step's attention is a matrix-vector product per row and KV head, which XLA's CPU
backend runs at about half the memory system's read rate and over the whole attention
window; the kernel reads each row's keys and values once, up to the row's own length (see
BENCHMARKS.md, "multi-turn rollout").  It is built with the system's C++ compiler at first
use (`-O3 -march=native`, a few seconds) into a cache keyed by the source, the jaxlib
version and the CPU, and registered as the FFI target `ragjax_cached_attention`.

`available()` is False, with one warning, when there is no compiler or the build fails, and
when `RAGJAX_CPU_ATTENTION=0`; callers then use the pure-JAX attention in `decoder.py`,
which is also the kernel's reference in the tests.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

TARGET = "ragjax_cached_attention"
SOURCE = Path(__file__).with_suffix(".cc")
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")
ENV_SWITCH = "RAGJAX_CPU_ATTENTION"

log = logging.getLogger(__name__)


def cache_dir() -> Path:
  root = os.environ.get("RAGJAX_KERNEL_CACHE") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ragjax", "kernels")
  return Path(root)


def _cpu_signature() -> str:
  """What `-march=native` depends on: the CPU's model and flags."""
  try:
    text = Path("/proc/cpuinfo").read_text()
    lines = [l for l in text.splitlines() if l.startswith(("model name", "flags"))][:2]
    return "\n".join(lines)
  except OSError:
    return platform.processor() or platform.machine()


def library_path() -> Path:
  key = hashlib.sha256()
  for part in (SOURCE.read_bytes(), jax.__version__.encode(), " ".join(FLAGS).encode(),
               _cpu_signature().encode()):
    key.update(part)
  return cache_dir() / f"cpu_attention-{key.hexdigest()[:16]}.so"


def build(out: Path) -> Path:
  """Compiles the kernel into `out` (atomically: concurrent builders do not clash)."""
  cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
  if cxx is None:
    raise RuntimeError("no C++ compiler (g++ / c++ / $CXX) on PATH")
  out.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
  os.close(fd)
  cmd = [cxx, *FLAGS, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", tmp]
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
      raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    os.replace(tmp, out)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  return out


@functools.cache
def available() -> bool:
  """Builds (once per source and machine) and registers the kernel; False if it cannot."""
  if os.environ.get(ENV_SWITCH, "1") == "0":
    return False
  try:
    path = library_path()
    if not path.exists():
      build(path)
    lib = ctypes.cdll.LoadLibrary(str(path))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.RagjaxCachedAttention),
                                platform="cpu")
    return True
  except Exception as e:  # no compiler, a failed build, an unloadable library
    log.warning("CPU attention kernel unavailable (%s); using XLA's attention", e)
    return False


def cached_attention(q, keys, values, limits, *, window: int):
  """q [B, KVH, M, D] (M = G * T, g-major) float32, keys / values [B, KVH, S, D] float32,
  limits [B, T] int32 -> [B, KVH, M, D]: query (g, t) of row b attends slots
  0..limits[b, t] (its own slot) of the first `window` slots, softmax(q k / sqrt(D)) v.
  A query whose limit is at or past `window` (a row that writes nothing: its slot is past
  the cache) gets zeros.  Needs `available()`."""
  d = q.shape[-1]
  call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(q.shape, jnp.float32),
                         vmap_method="sequential")
  return call(
      q.astype(jnp.float32), keys.astype(jnp.float32), values.astype(jnp.float32),
      limits.astype(jnp.int32), scale=np.float32(1.0 / d ** 0.5), window=np.int64(window))
