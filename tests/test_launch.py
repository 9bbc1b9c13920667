"""Launch scripts: the local multi-process mode runs real JAX processes on 127.0.0.1; the TPU
pod and Slurm scripts print, in DRY_RUN mode, the install and the commands they would run on
each worker; each sets the backend its run expects; the install extras pin one JAX."""

import importlib.metadata
import json
import os
import re
import subprocess

import jax
import pytest

from ragjax.parallel import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **env):
  e = dict(os.environ, JAX_PLATFORMS="cpu")
  e.pop("XLA_FLAGS", None)
  e.update(env)
  return subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)


def test_local_launcher_runs_two_jax_processes(tmp_path):
  p = run(["bash", "launch/local.sh", "ragjax.tools.multihost_check"], NUM_PROCESSES="2",
          LOG_DIR=str(tmp_path), XLA_FLAGS="--xla_force_host_platform_device_count=2")
  assert p.returncode == 0, p.stderr
  lines = [json.loads(open(tmp_path / f"proc{i}.log").read().strip().splitlines()[-1])
           for i in range(2)]
  assert [l["process"] for l in lines] == [0, 1]
  assert all(l["ok"] and l["processes"] == 2 and l["devices"] == 4 for l in lines)


def test_local_launcher_reports_a_failed_process(tmp_path):
  p = run(["bash", "launch/local.sh", "ragjax.no_such_module"], NUM_PROCESSES="2",
          LOG_DIR=str(tmp_path))
  assert p.returncode == 1 and "process 0 failed" in p.stderr


def test_pod_and_slurm_scripts_dry_run():
  p = run(["bash", "launch/tpu_pod.sh", "ragjax.train", "--config=configs/search_r1.py:qwen2.5-3b"],
          DRY_RUN="1", TPU="my-v5p-32", ZONE="us-east5-a")
  assert p.returncode == 0, p.stderr
  ssh, scp = p.stdout.strip().splitlines()
  assert ssh.startswith("gcloud compute tpus tpu-vm ssh my-v5p-32 --zone=us-east5-a --worker=all")
  # every worker installs the TPU extra (the pinned JAX with libtpu) and expects a TPU
  assert "cd ~/ragjax && python -m pip install -q -e '.[tpu]' && " in ssh
  assert ("RAGJAX_EXPECT_BACKEND=tpu RAGJAX_NUM_PROCESSES=auto python -m ragjax.train "
          "--config=configs/search_r1.py:qwen2.5-3b") in ssh
  assert scp.startswith("gcloud compute tpus tpu-vm scp my-v5p-32:")
  p = run(["bash", "launch/tpu_pod.sh", "ragjax.train"], DRY_RUN="1", TPU="t", ZONE="z",
          SKIP_INSTALL="1")
  assert "pip install" not in p.stdout and "RAGJAX_EXPECT_BACKEND=tpu" in p.stdout
  p = run(["bash", "launch/slurm.sbatch", "ragjax.train", "--config=x"], DRY_RUN="1",
          SLURM_NNODES="3")
  lines = p.stdout.strip().splitlines()
  assert p.returncode == 0 and len(lines) == 4
  assert lines[0] == "python -m pip install -q -e .[cuda12]"
  assert lines[3] == ("RAGJAX_EXPECT_BACKEND=gpu RAGJAX_COORDINATOR=node0:12355 "
                      "RAGJAX_NUM_PROCESSES=3 RAGJAX_PROCESS_ID=2 python -m ragjax.train --config=x")
  p = run(["bash", "launch/slurm.sbatch", "ragjax.train"], DRY_RUN="1", CUDA_EXTRA="cuda13")
  assert p.stdout.splitlines()[0] == "python -m pip install -q -e .[cuda13]"
  p = run(["bash", "launch/slurm.sbatch", "ragjax.train"], DRY_RUN="1", SKIP_INSTALL="1")
  assert "pip install" not in p.stdout and len(p.stdout.splitlines()) == 2
  p = run(["bash", "launch/local.sh", "ragjax.train", "--config=y"], DRY_RUN="1",
          NUM_PROCESSES="2", COORDINATOR_PORT="4567", RAGJAX_EXPECT_BACKEND="gpu")
  assert p.stdout.splitlines()[1].startswith(
      "RAGJAX_EXPECT_BACKEND=gpu RAGJAX_COORDINATOR=127.0.0.1:4567 RAGJAX_NUM_PROCESSES=2 "
      "RAGJAX_PROCESS_ID=1 python -m ragjax.train --config=y")
  p = run(["bash", "launch/local.sh", "ragjax.train"], DRY_RUN="1")
  # this machine's own backend: cpu here, gpu / tpu where nvidia-smi or TPU devices show one
  assert re.fullmatch(r"RAGJAX_EXPECT_BACKEND=(cpu|gpu|tpu) python -m ragjax.train ",
                      p.stdout.rstrip("\n")), p.stdout


def test_local_launcher_run_expecting_a_gpu_stops_before_training(tmp_path):
  """A real process through the launcher: the expected backend reaches the entry point, which
  refuses a CPU-only JAX in one line, exit 2, before it builds anything."""
  if backend.installed_plugins("gpu"):
    pytest.skip("a GPU plug-in is installed here")
  p = run(["bash", "launch/local.sh", "ragjax.train", "--config=configs/search_r1.py:tiny",
           f"--config.workdir={tmp_path}/w"], RAGJAX_EXPECT_BACKEND="gpu")
  assert p.returncode == 2 and p.stdout == ""
  (line,) = p.stderr.strip().splitlines()
  assert line.startswith("ragjax.train: error: RAGJAX_EXPECT_BACKEND=gpu needs a GPU")
  assert "jax-cuda12-plugin" in line and "`pip install -e .[cuda12]`" in line
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("script", ["launch/smollm2_gpu.sh", "launch/compare_gpu.sh"])
def test_gpu_scripts_stop_at_the_backend_check_on_a_cpu(tmp_path, script):
  """The prepared GPU runs check the backend first: on a CPU they exit 2 and start nothing
  (no training or comparison log in OUT, no workdir)."""
  if backend.installed_plugins("gpu"):
    pytest.skip("a GPU plug-in is installed here")
  out = tmp_path / "out"
  p = run(["bash", script, str(out)], WORKDIR=str(tmp_path / "w"))
  assert p.returncode == 2, p.stderr[-2000:]
  assert sorted(os.listdir(out)) == ["backend.json"]
  assert not (tmp_path / "w").exists()


def test_accelerator_extras_pin_the_same_jax():
  """pyproject's cuda / tpu extras pin requirements.txt's JAX, and that JAX declares each
  extra they use (so `pip install -e .[tpu]` cannot swap the JAX the CPU install tested)."""
  tomllib = pytest.importorskip("tomllib")
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  assert project["dynamic"] == ["dependencies"]          # still requirements.txt
  pins = dict(line.split("==") for line in open(os.path.join(ROOT, "requirements.txt"))
              if line.startswith(("jax==", "jaxlib==")))
  assert pins["jax"].strip() == pins["jaxlib"].strip() == jax.__version__
  extras = project["optional-dependencies"]
  assert set(extras) >= {"cuda12", "cuda13", "tpu"}
  provided = set(importlib.metadata.metadata("jax").get_all("Provides-Extra"))
  for name, reqs in extras.items():
    (req,) = reqs
    m = re.fullmatch(r"jax\[([a-z0-9-]+)\]==(.+)", req)
    assert m and m.group(1) == name and m.group(2) == pins["jax"].strip(), req
    assert name in provided, name
