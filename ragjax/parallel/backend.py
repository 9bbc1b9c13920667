"""The backend an entry point runs on: one line saying what JAX found, and a refusal when an
accelerator was expected and JAX has only the CPU.

JAX falls back to the CPU with a warning when its GPU or TPU plug-in is missing or fails to
start, and a paper-size run would then crawl for days before anyone noticed.  Every entry
point that runs a model calls `start(program, config)` before its work:

  1. what it must run on: `RAGJAX_EXPECT_BACKEND` (gpu | tpu | cpu; the launchers set it; cpu
     means no accelerator is needed), else `target` (a train run's `--target`, or the config's
     `hardware`: h100x8 -> gpu, v5p-32 -> tpu);
  2. before JAX starts (seconds, nothing built): that platform's plug-in is installed and
     `JAX_PLATFORMS` lets JAX use it;
  3. the multi-host start-up (`maybe_initialize`), when the entry point asks for it;
  4. after JAX starts: it runs on that platform, and a config's `mesh` does not ask a
     CPU-only JAX for more devices than it has (fake CPU devices, `XLA_FLAGS=
     --xla_force_host_platform_device_count=N`, exempt it);
  5. one line on stderr: backend, device count, device kind, JAX version, plug-ins.
A failed check prints one `error:` line naming the missing plug-in and its install command
and exits 2.  `python -m ragjax.parallel.backend [--expect gpu]` prints the same facts as one
JSON line (the check to run after an install).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
from typing import Optional

EXPECT_ENV = "RAGJAX_EXPECT_BACKEND"
PLATFORMS = ("cpu", "gpu", "tpu")
# platform -> (module, distribution) of the plug-ins that give JAX that platform
PLUGINS = {
    "gpu": (("jax_cuda12_plugin", "jax-cuda12-plugin"), ("jax_cuda13_plugin", "jax-cuda13-plugin"),
            ("jax_rocm7_plugin", "jax-rocm7-plugin"), ("jax_rocm60_plugin", "jax-rocm60-plugin")),
    "tpu": (("libtpu", "libtpu"),),
}
WHAT = {"gpu": "JAX's CUDA plug-in (jax-cuda12-plugin)", "tpu": "JAX's TPU runtime (libtpu)"}
INSTALL = {"gpu": "pip install -e .[cuda12]", "tpu": "pip install -e .[tpu]"}
INSTALL_NOTE = {"gpu": " (CUDA 13 drivers: .[cuda13]; a cluster's own CUDA: .[cuda12-local])",
                "tpu": ""}
# names JAX_PLATFORMS may give each platform
JAX_NAMES = {"cpu": ("cpu",), "gpu": ("gpu", "cuda", "rocm"), "tpu": ("tpu",)}
FAKE_DEVICES_FLAG = "--xla_force_host_platform_device_count"


class BackendError(ValueError):
  """The backend JAX has is not the one this run needs."""


@dataclasses.dataclass(frozen=True)
class Expectation:
  platform: str       # gpu | tpu
  reason: str         # what asked for it, e.g. "RAGJAX_EXPECT_BACKEND=gpu"


def platform_of(hardware: str) -> str:
  """gpu or tpu for an accelerator slice name (h100x8, a100x16, v5p-32, v6e-8, ...)."""
  from ragjax.parallel.memory import parse_target
  return "tpu" if parse_target(hardware).kind.startswith("TPU") else "gpu"


def expected(target: str = "") -> Optional[Expectation]:
  """The accelerator this run must have, or None (`RAGJAX_EXPECT_BACKEND=cpu` wins over
  `target`: run here on purpose)."""
  env = os.environ.get(EXPECT_ENV, "").strip().lower()
  if env:
    if env not in PLATFORMS:
      raise BackendError(f"{EXPECT_ENV}={env!r}: use one of {', '.join(PLATFORMS)}")
    return None if env == "cpu" else Expectation(env, f"{EXPECT_ENV}={env}")
  if target:
    return Expectation(platform_of(target), f"hardware {target} (--target or the config's "
                       "`hardware`)")
  return None


def installed_plugins(platform: Optional[str] = None) -> dict:
  """{distribution: version} of the accelerator plug-ins installed (one platform's, or all)."""
  out = {}
  for p, plugins in PLUGINS.items():
    if platform in (None, p):
      for module, dist in plugins:
        if importlib.util.find_spec(module) is not None:
          try:
            out[dist] = importlib.metadata.version(dist)
          except importlib.metadata.PackageNotFoundError:
            out[dist] = "?"
  return out


def jax_platforms() -> list[str]:
  """The platforms `JAX_PLATFORMS` (or jax.config) restricts JAX to; [] when unrestricted."""
  names = os.environ.get("JAX_PLATFORMS", "")
  if not names:
    import jax
    names = jax.config.jax_platforms or ""
  return [n.strip().lower() for n in names.split(",") if n.strip()]


def host_only() -> None:
  """For a process that runs no model (a BM25 retrieval server): keep JAX on the CPU.  bm25s
  calls `jax.lax.top_k` when it is imported, and on a GPU host that would start CUDA in this
  process and reserve most of the GPU's memory (JAX preallocates 75%) beside the trainer that
  needs it.  Call before anything starts JAX's backend."""
  import jax
  jax.config.update("jax_platforms", "cpu")


MEMORY_ENV = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_CLIENT_MEM_FRACTION",
              "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


def beside_a_trainer() -> None:
  """For a small JAX process that shares its accelerator with a trainer (a dense retrieval
  server's query encoder): JAX allocates memory as it needs it instead of reserving 75% of
  the device when it starts.  A memory setting of one's own (`XLA_PYTHON_CLIENT_PREALLOCATE`,
  a memory fraction, an allocator) is kept.  Call before anything starts JAX's backend (the
  GPU plug-in reads them when it starts)."""
  if not set(MEMORY_ENV) & set(os.environ):
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"


def install_hint(platform: str) -> str:
  return f"install it with `{INSTALL[platform]}`{INSTALL_NOTE[platform]}"


def on_purpose() -> str:
  return f"or set {EXPECT_ENV}=cpu to run on the CPU on purpose"


def check_installed(exp: Expectation) -> None:
  """Before JAX starts: the plug-in for `exp.platform` is installed and JAX may use it."""
  import jax
  name = exp.platform.upper()
  if not installed_plugins(exp.platform):
    raise BackendError(
        f"{exp.reason} needs a {name} but JAX {jax.__version__} has only the CPU: "
        f"{WHAT[exp.platform]} is not installed; {install_hint(exp.platform)}, {on_purpose()}")
  allowed = jax_platforms()
  if allowed and not set(allowed) & set(JAX_NAMES[exp.platform]):
    raise BackendError(f"{exp.reason} needs a {name} but JAX_PLATFORMS={','.join(allowed)} "
                       f"keeps JAX off it; unset JAX_PLATFORMS, {on_purpose()}")


def describe() -> dict:
  """What JAX runs on (starts its backend)."""
  import jax
  import jaxlib
  devices = jax.devices()
  return {"backend": jax.default_backend(), "devices": len(devices),
          "local_devices": jax.local_device_count(), "processes": jax.process_count(),
          "device_kind": devices[0].device_kind, "jax": jax.__version__,
          "jaxlib": jaxlib.__version__, "plugins": installed_plugins()}


def check_running(exp: Optional[Expectation], info: dict, config=None) -> None:
  """After JAX starts: the expected platform, and a mesh the devices can hold."""
  if exp is not None and info["backend"] != exp.platform:
    plugins = ", ".join(installed_plugins(exp.platform)) or WHAT[exp.platform]
    raise BackendError(
        f"{exp.reason} needs a {exp.platform.upper()} but JAX {info['jax']} started on "
        f"{info['backend']}: {plugins} did not start (JAX's warning above says why: a driver, "
        f"CUDA or libtpu version that does not match?); reinstall with "
        f"`{INSTALL[exp.platform]}`{INSTALL_NOTE[exp.platform]}, {on_purpose()}")
  sizes = mesh_sizes(config)
  need = math.prod(sizes.values()) if sizes and min(sizes.values()) >= 1 else 0
  if (need > info["devices"] and info["backend"] == "cpu"
      and FAKE_DEVICES_FLAG not in os.environ.get("XLA_FLAGS", "")):
    plugins = ", ".join(info["plugins"])
    why = (f"{plugins} installed but not started" if plugins else
           f"no accelerator plug-in is installed (GPU: `{INSTALL['gpu']}`; TPU: "
           f"`{INSTALL['tpu']}`)")
    raise BackendError(
        f"mesh {sizes} needs {need} devices and JAX {info['jax']} has {info['devices']} CPU "
        f"device(s): {why}; to try a mesh on the CPU, add fake devices with "
        f"XLA_FLAGS={FAKE_DEVICES_FLAG}={need}")


def mesh_sizes(config) -> dict:
  """A config's `mesh` axis sizes ({} without one; -1: the devices the others leave)."""
  from ragjax.parallel.mesh import MESH_AXES
  mesh = None if config is None else config.get("mesh", None)
  return {a: int(mesh[a]) for a in MESH_AXES} if mesh else {}


def header(program: str, info: dict) -> str:
  plugins = ",".join(f"{k}=={v}" for k, v in info["plugins"].items()) or "none"
  return (f"{program}: backend={info['backend']} devices={info['devices']} "
          f"local={info['local_devices']} processes={info['processes']} "
          f"kind=\"{info['device_kind']}\" jax={info['jax']} jaxlib={info['jaxlib']} "
          f"plugins={plugins}")


def check(config=None, target: str = "", initialize: bool = False) -> dict:
  """Steps 1-4 of the module docstring; raises BackendError.  Returns `describe()`."""
  exp = expected(target)
  if exp is not None:
    check_installed(exp)
  if initialize:
    from ragjax.parallel.distributed import maybe_initialize
    maybe_initialize()
  info = describe()
  check_running(exp, info, config)
  return info


def start(program: str, config=None, target: str = "", initialize: bool = False) -> dict:
  """`check`, then the one-line header on stderr; a failed check: one `error:` line, exit 2."""
  try:
    info = check(config, target, initialize)
  except BackendError as e:
    print(f"{program}: error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)
  print(header(program, info), file=sys.stderr, flush=True)
  return info


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description="Print what JAX runs on (one JSON line); exit 2 "
                               "when --expect (or RAGJAX_EXPECT_BACKEND) names an accelerator "
                               "JAX does not have.")
  ap.add_argument("--expect", choices=PLATFORMS, default=None,
                  help=f"the platform this machine must give JAX (default: ${EXPECT_ENV})")
  args = ap.parse_args(argv)
  if args.expect:
    os.environ[EXPECT_ENV] = args.expect
  info = start("ragjax.parallel.backend")
  print(json.dumps(info), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
