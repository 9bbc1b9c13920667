"""CPU numerics pinned so a run's numbers do not depend on the machine: its thread count
(`cpu_threads`) and the instruction set XLA generates code for (`cpu_isa`).

Threads: XLA's CPU backend splits a reduction (a column sum, a gradient's batch sum) over its
intra-op thread pool, whose size is the number of cores the process may use; a different split
adds in a different order, so one seed gives different floats on a 1-core and a 2-core
machine, and a sampled RL run then diverges (found on the embedded default, whose table
differed between two machines; jax-ml/jax#39741 reports the same).  The pool has no size
setting, but it is sized from the process's CPU affinity when the backend starts, so `pin(n)`
narrows the affinity to n cores first.

Instruction set: XLA compiles its fused kernels for the best vector unit the CPU has, and the
decoder's forward comes out in other bits with AVX-512 code than with AVX2 code (a one-layer
128-wide decoder's logits, 2026-11-26; the embedded default's SFT losses differ from step 10).
`pin(n, isa)` caps the code at `isa` (`--xla_cpu_max_isa`, appended to `XLA_FLAGS` unless it
is already there), so an AVX-512 machine and an AVX2-only one compute the same bits.  Same n,
same isa, same library versions: same numbers (ScaNN's own SIMD code is not covered: its index
was the same with 1 and 2 threads, other instruction sets untested).

Only a CPU-only run is pinned (`JAX_PLATFORMS=cpu`, or no GPU / TPU plug-in installed): on an
accelerator the host threads feed the devices and the device math is not affected.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import warnings

# x86 names `--xla_cpu_max_isa` takes (XLA warns and ignores any other name).
X86_ISAS = ("SSE4_2", "AVX", "AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX", "AMX_FP16")
ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm7_plugin",
                       "jax_rocm60_plugin", "libtpu")


def cpu_only() -> bool:
  """Whether JAX will run on the CPU: `JAX_PLATFORMS` says so, or no accelerator plug-in."""
  platforms = os.environ.get("JAX_PLATFORMS", "")
  if not platforms:
    import jax
    platforms = jax.config.jax_platforms or ""
  if platforms:
    return [p.strip() for p in platforms.split(",") if p.strip()] == ["cpu"]
  return not any(importlib.util.find_spec(m) for m in ACCELERATOR_PLUGINS)


def pin(n: int, isa: str = "") -> int:
  """Narrows this process's CPU affinity to n cores (the lowest-numbered it may use) and caps
  XLA's generated code at instruction set `isa`, before JAX's CPU backend starts; returns the
  cores it runs on.  n = 0: all cores (n < 0 is refused); isa "": the CPU's best; an accelerator run: neither.
  Fewer than n cores: all of them, with a warning (the numbers will differ from an n-core
  run).  The entry points call it first thing: once the backend has started its pool is
  sized and its flags read, and pinning then changes nothing."""
  if isinstance(n, bool) or not isinstance(n, int) or n < 0:
    raise ValueError(f"cpu_threads must be an integer >= 0 (0: all cores), got {n!r}")
  isa = str(isa or "").upper()
  if isa and isa not in X86_ISAS:
    raise ValueError(f"cpu_isa={isa!r} is not an instruction set XLA knows; use one of "
                     f"{', '.join(X86_ISAS)} or '' (the CPU's best)")
  have = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  if (n <= 0 and not isa) or not cpu_only():
    return have
  if isa:
    cap_isa(isa)
  if n <= 0 or not hasattr(os, "sched_setaffinity"):
    return have
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < n:
    warnings.warn(f"cpu_threads={n} but this process may use only {len(cores)} core(s): its "
                  f"floating-point results will differ from a {n}-core run", stacklevel=2)
    return len(cores)
  os.sched_setaffinity(0, cores[:n])
  return n


def cap_isa(isa: str) -> None:
  """Appends `--xla_cpu_max_isa=isa` to `XLA_FLAGS` (a cap already there wins; on a non-x86
  CPU a warning: its code is not comparable with an x86 run's)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if "--xla_cpu_max_isa" in flags:
    return
  if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
    warnings.warn(f"cpu_isa={isa} is an x86 instruction set and this CPU is "
                  f"{platform.machine()}: its floating-point results will differ from an x86 "
                  "run's", stacklevel=3)
    return
  os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa={isa}".strip()


def pin_config(config) -> int:
  """`pin` with a config's `cpu_threads` and `cpu_isa` (absent fields: unpinned)."""
  return pin(config.get("cpu_threads", 0), config.get("cpu_isa", ""))
