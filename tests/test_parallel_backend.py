"""The backend check every entry point runs first (ragjax/parallel/backend.py): real processes
asked for an accelerator on this CPU-only JAX stop with one `error:` line naming the missing
plug-in and its install command, exit 2, having built nothing; a run that may use the CPU
says what JAX runs on in one line."""

import json
import os
import subprocess
import sys

import jax
import pytest

from _xla_helpers import xla_flags
from ml_collections import ConfigDict

from ragjax.parallel import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "--config=configs/search_r1.py:tiny"
no_accelerator = pytest.mark.skipif(bool(backend.installed_plugins()),
                                    reason="an accelerator plug-in is installed here")


def env(**extra):
  e = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  for k in ("RAGJAX_TRACEBACK", backend.EXPECT_ENV):
    e.pop(k, None)
  e.update(extra)
  return e


def run_all(cases):
  """[(returncode, stdout, stderr)] of `python -m ...` processes, four at a time."""
  out = []
  for i in range(0, len(cases), 4):
    procs = [subprocess.Popen([sys.executable, "-m", *cmd], cwd=ROOT, env=e, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for cmd, e in cases[i:i + 4]]
    for p in procs:
      o, err = p.communicate(timeout=120)
      out.append((p.returncode, o, err))
  return out


@no_accelerator
def test_entry_points_refuse_a_cpu_only_jax_when_an_accelerator_is_expected(tmp_path):
  work = f"--config.workdir={tmp_path}/w"
  cases = [
      (["ragjax.train", TINY, work], env(RAGJAX_EXPECT_BACKEND="gpu"), "ragjax.train", "gpu"),
      (["ragjax.evaluate", TINY, work, f"--checkpoint={tmp_path}"],
       env(RAGJAX_EXPECT_BACKEND="tpu"), "ragjax.evaluate", "tpu"),
      (["ragjax.ablate", TINY, work, "--b", "b:"], env(RAGJAX_EXPECT_BACKEND="gpu"),
       "ragjax.ablate", "gpu"),
      (["ragjax.services.chat_server", "--checkpoint", str(tmp_path)],
       env(RAGJAX_EXPECT_BACKEND="gpu"), "ragjax.services.chat_server", "gpu"),
      # a train run's --target, and a paper config's `hardware`, expect their accelerator
      (["ragjax.train", TINY, work, "--target=v5p-32"], env(), "ragjax.train", "tpu"),
      (["ragjax.train", "--config=configs/search_r1.py:qwen2.5-3b", work], env(),
       "ragjax.train", "gpu"),
  ]
  results = run_all([(cmd, e) for cmd, e, _, _ in cases])
  plugin = {"gpu": ("jax-cuda12-plugin", "`pip install -e .[cuda12]`"),
            "tpu": ("libtpu", "`pip install -e .[tpu]`")}
  for (cmd, _, program, platform), (rc, out, err) in zip(cases, results):
    assert rc == 2 and out == "", (cmd, rc, err)
    (line,) = err.strip().splitlines()              # one line: no header, no traceback
    assert line.startswith(f"{program}: error: "), line
    assert f"needs a {platform.upper()} but JAX" in line and "has only the CPU" in line
    assert all(s in line for s in plugin[platform]), line
    assert "RAGJAX_EXPECT_BACKEND=cpu" in line      # how to run on the CPU on purpose
  assert "hardware v5p-32" in results[4][2] and "hardware h100x8" in results[5][2]
  assert not (tmp_path / "w").exists()              # refused before building anything


@no_accelerator
def test_a_mesh_larger_than_the_cpu_devices_names_the_missing_plugin(tmp_path):
  e = env()
  e["XLA_FLAGS"] = xla_flags()      # no fake CPU devices: JAX has one
  ((rc, out, err),) = run_all([(["ragjax.train", TINY, f"--config.workdir={tmp_path}/w",
                                 "--config.mesh.fsdp=4"], e)])
  assert rc == 2 and out == ""
  (line,) = err.strip().splitlines()
  assert line.startswith("ragjax.train: error: mesh {'data': 1, 'fsdp': 4, 'tensor': 1} needs "
                         "4 devices and JAX")
  assert "`pip install -e .[cuda12]`" in line and "`pip install -e .[tpu]`" in line
  assert "--xla_force_host_platform_device_count=4" in line


def test_the_check_command_prints_the_backend_and_devices():
  ((rc, out, err),) = run_all([(["ragjax.parallel.backend"], env())])
  assert rc == 0, err
  info = json.loads(out)
  assert info["backend"] == "cpu" and info["jax"] == jax.__version__
  assert info["devices"] == info["local_devices"] >= 1 and info["processes"] == 1
  assert err.strip() == backend.header("ragjax.parallel.backend", info)
  assert f"backend=cpu devices={info['devices']} " in err and "jax=" + jax.__version__ in err


def test_expectations(monkeypatch):
  monkeypatch.delenv(backend.EXPECT_ENV, raising=False)
  assert backend.expected() is None
  assert backend.expected("h100x8") == backend.Expectation(
      "gpu", "hardware h100x8 (--target or the config's `hardware`)")
  assert backend.expected("v6e-8").platform == "tpu"
  monkeypatch.setenv(backend.EXPECT_ENV, "cpu")         # on purpose: the target is not needed
  assert backend.expected("h100x8") is None
  monkeypatch.setenv(backend.EXPECT_ENV, "GPU")
  assert backend.expected() == backend.Expectation("gpu", "RAGJAX_EXPECT_BACKEND=gpu")
  monkeypatch.setenv(backend.EXPECT_ENV, "cuda")
  with pytest.raises(backend.BackendError, match="use one of cpu, gpu, tpu"):
    backend.expected()


def test_check_in_process(monkeypatch):
  """This process (the suite's fake CPU devices): nothing expected passes and describes JAX;
  a mesh over more devices than exist is left to the mesh builder when the devices are fake,
  and refused when they are not."""
  monkeypatch.delenv(backend.EXPECT_ENV, raising=False)
  config = ConfigDict({"mesh": {"data": 1, "fsdp": -1, "tensor": 1}})
  info = backend.check(config)
  assert info["backend"] == "cpu" and info["devices"] == jax.device_count()
  config.mesh.fsdp = 2 * jax.device_count()
  monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count={jax.device_count()}")
  backend.check(config)
  monkeypatch.setenv("XLA_FLAGS", "")
  with pytest.raises(backend.BackendError, match=f"needs {2 * jax.device_count()} devices"):
    backend.check(config)


@no_accelerator
def test_host_only_keeps_jax_off_accelerators_that_bm25s_would_start():
  """bm25s runs `jax.lax.top_k` on import; a BM25 server calls `host_only` first, so even with
  JAX_PLATFORMS naming an accelerator JAX starts only the CPU (here, without it, importing bm25s
  fails: its probe starts JAX on the missing CUDA plug-in)."""
  code = ("import sys; from ragjax.parallel.backend import host_only\n"
          "if sys.argv[1] == 'on': host_only()\n"
          "import bm25s.selection, jax\n"
          "print(bm25s.selection.JAX_IS_AVAILABLE, jax.config.jax_platforms)\n"
          "print(jax.default_backend())")
  runs = {}
  for mode in ("on", "off"):
    p = subprocess.run([sys.executable, "-c", code, mode], cwd=ROOT, text=True, timeout=120,
                       capture_output=True, env=env(JAX_PLATFORMS="cuda"))
    runs[mode] = p
  assert runs["on"].returncode == 0, runs["on"].stderr[-2000:]
  assert runs["on"].stdout.split() == ["True", "cpu", "cpu"]
  assert runs["off"].returncode != 0 and "bm25s" in runs["off"].stderr   # its probe tried CUDA
