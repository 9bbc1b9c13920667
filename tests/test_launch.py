"""Launch scripts: the local multi-process mode runs real JAX processes on 127.0.0.1; the TPU
pod and Slurm scripts print, in DRY_RUN mode, the commands they would run on each worker."""

import json
import os
import subprocess

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
  assert "pip install -q -r requirements.txt -e ." in ssh
  assert "RAGJAX_NUM_PROCESSES=auto python -m ragjax.train --config=configs/search_r1.py:qwen2.5-3b" in ssh
  assert scp.startswith("gcloud compute tpus tpu-vm scp my-v5p-32:")
  p = run(["bash", "launch/slurm.sbatch", "ragjax.train", "--config=x"], DRY_RUN="1",
          SLURM_NNODES="3")
  lines = p.stdout.strip().splitlines()
  assert p.returncode == 0 and len(lines) == 3
  assert lines[2] == ("RAGJAX_COORDINATOR=node0:12355 RAGJAX_NUM_PROCESSES=3 RAGJAX_PROCESS_ID=2 "
                      "python -m ragjax.train --config=x")
  p = run(["bash", "launch/local.sh", "ragjax.train", "--config=y"], DRY_RUN="1",
          NUM_PROCESSES="2", COORDINATOR_PORT="4567")
  assert p.stdout.splitlines()[1].startswith(
      "RAGJAX_COORDINATOR=127.0.0.1:4567 RAGJAX_NUM_PROCESSES=2 RAGJAX_PROCESS_ID=1 python -m ragjax.train --config=y")
