"""Starting a ragjax server (`python -m <module> ...`) on 127.0.0.1 for a benchmark, and
stopping it: the free port, this checkout on the child's path, and a bounded wait for
`/health`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def child_env() -> dict:
  """This checkout first on the child's path; JAX on the CPU unless the caller said otherwise."""
  env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env


def start(module: str, *args: str, timeout: float = 300.0) -> tuple[subprocess.Popen, str]:
  """`python -m module --port P args...` on a free port; returns (process, base URL) once its
  `/health` answers, or raises with the tail of its output."""
  import requests
  port = free_port()
  log = tempfile.TemporaryFile()     # a file, not a pipe: a chatty server never blocks on it
  proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(port), *args],
                          env=child_env(), stdout=log, stderr=subprocess.STDOUT)
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + timeout
  while time.time() < deadline:
    if proc.poll() is not None:
      log.seek(0)
      raise RuntimeError(f"{module} exited with {proc.returncode}: "
                         f"{log.read().decode(errors='replace')[-2000:]}")
    try:
      if requests.get(url + "/health", timeout=1).ok:
        return proc, url
    except requests.RequestException:
      time.sleep(0.2)
  proc.kill()
  raise RuntimeError(f"{module} did not answer /health within {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
  """Terminates a server (if it still runs), then kills it after 20 s."""
  if proc.poll() is not None:
    return
  proc.terminate()
  try:
    proc.wait(timeout=20)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()


def rss_mb(pid: int) -> float:
  """A process's resident memory in MB (Linux /proc), or -1 where unavailable."""
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return -1.0
