"""`python -m MODULE ARGS ...` as real processes forked from one interpreter that has already
imported the third-party libraries (jax, flax, optax, orbax, fastapi, ...), for tests that
start many short commands (tests/test_cli_errors.py: about 80 refusals, each of which spent
about 2 of its 2.5 CPU seconds importing those).

Each command runs in its own process (`os.fork` of the preloaded server), as the interpreter
runs `python -m`: `runpy.run_module(MODULE, run_name="__main__", alter_sys=True)` with
`sys.argv` set, stdin from /dev/null, stdout and stderr to files; its exit status is
`SystemExit`'s code, or 1 after `sys.excepthook` prints an uncaught exception (a traceback,
unless the command installed its own hook), after non-daemon threads and atexit handlers ran.
Everything of the project (`ragjax.*`), its flags and JAX's backend start fresh in each
process: the server imports no project module and starts no backend (forking a process whose
XLA threads run is unsafe), and it is started with the commands' environment, since JAX reads
its `JAX_*` variables at import.

    with Preloaded(env, cwd) as server:
      rc, out, err = server.run_all([["ragjax.train", "--config=..."], ...], timeout=120)

Server protocol (one JSON object per line): the test writes {"id", "argv", "out", "err"};
the server answers {"id", "pid"} when it forked and {"id", "rc"} when the process ended."""

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

# third-party modules the entry points import before they refuse bad input (measured with
# `python -X importtime -m ...`); none of them starts a thread at import (pyarrow does: left out)
PRELOAD = ("numpy", "jax", "jax.numpy", "flax.linen", "optax", "orbax.checkpoint", "tensorstore",
           "ml_collections", "absl.app", "absl.flags", "requests", "fastapi", "starlette",
           "uvicorn", "etils.epath", "safetensors.numpy")


class Preloaded:
  """A preloaded server (`python tests/_preloaded.py`) and the commands it forks."""

  def __init__(self, env: dict, cwd: str):
    self.dir = tempfile.mkdtemp(prefix="preloaded-")
    self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], cwd=cwd, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    self.count = 0
    self.buffer = b""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.close()
      self.proc.wait(timeout=60)
    shutil.rmtree(self.dir, ignore_errors=True)

  def _message(self, wait: float):
    """The server's next message, or None after `wait` seconds without one."""
    while b"\n" not in self.buffer:
      ready, _, _ = select.select([self.proc.stdout], [], [], wait)
      if not ready:
        return None
      data = os.read(self.proc.stdout.fileno(), 65536)
      if not data:
        raise RuntimeError(f"the preloaded server exited ({self.proc.wait()})")
      self.buffer += data
    line, self.buffer = self.buffer.split(b"\n", 1)
    return json.loads(line)

  def run_all(self, commands, timeout: float = 120, parallel: int = 4, report=None) -> list:
    """(exit status, stdout, stderr) of each command (`[MODULE, ARG, ...]`), `parallel` at a
    time; a command still running after `timeout` seconds is killed, its stderr then starting
    with "still running after".  `report(i, result)` is called as command i ends."""
    results = [None] * len(commands)
    todo = list(range(len(commands)))
    running = {}                 # id -> [index, pid, start, out path, err path, killed]

    def handle(msg):
      if "pid" in msg:
        running[msg["id"]][1] = msg["pid"]
        return
      i, _, _, out, err, killed = running.pop(msg["id"])
      texts = []
      for path in (out, err):
        with open(path, errors="replace") as f:
          texts.append(f.read())
        os.remove(path)
      if killed:
        texts[1] = f"still running after {timeout:g} s: " + texts[1][-400:]
      results[i] = (msg["rc"], *texts)
      if report is not None:
        report(i, results[i])

    while todo or running:
      while todo and len(running) < parallel:
        i = todo.pop(0)
        self.count += 1
        cid = self.count
        out, err = (os.path.join(self.dir, f"{cid}.{s}") for s in ("out", "err"))
        running[cid] = [i, None, time.time(), out, err, False]
        self.proc.stdin.write((json.dumps(dict(id=cid, argv=list(commands[i]), out=out,
                                               err=err)) + "\n").encode())
        self.proc.stdin.flush()
      msg = self._message(wait=1.0)
      if msg is not None:
        handle(msg)
      for entry in running.values():
        if entry[1] is not None and not entry[5] and time.time() - entry[2] > timeout:
          entry[5] = True
          os.kill(entry[1], 9)
    return results


def child(argv, out, err) -> None:
  """In the forked process: run `python -m argv[0] argv[1:]` and exit as the interpreter
  would."""
  import atexit
  import runpy
  import threading
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  for path, fd in ((out, 1), (err, 2)):
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
  sys.argv = list(argv)
  sys.path[0] = os.getcwd()           # as `python -m` puts the working directory first
  code = 0
  try:
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
  except SystemExit as e:
    if e.code is None or isinstance(e.code, int):
      code = e.code or 0
    else:
      print(e.code, file=sys.stderr)
      code = 1
  except BaseException:               # noqa: BLE001  (what the interpreter does with it)
    sys.excepthook(*sys.exc_info())
    code = 1
  try:
    threading._shutdown()             # noqa: SLF001  (the interpreter joins non-daemon threads)
    atexit._run_exitfuncs()           # noqa: SLF001
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def serve() -> None:
  """The server: preload, then fork one process per request line; report each one's end."""
  import importlib
  for name in PRELOAD:
    importlib.import_module(name)
  proto = os.fdopen(os.dup(1), "w", buffering=1)
  requests_in = sys.stdin.buffer.raw
  pending = b""
  children = {}                                   # pid -> id
  stdin_open = True
  while stdin_open or children:
    if stdin_open:
      ready, _, _ = select.select([requests_in], [], [], 0.02)
      if ready:
        data = os.read(requests_in.fileno(), 65536)
        stdin_open = bool(data)
        pending += data
        while b"\n" in pending:
          line, pending = pending.split(b"\n", 1)
          req = json.loads(line)
          sys.stdout.flush()
          sys.stderr.flush()
          pid = os.fork()
          if pid == 0:
            proto.close()
            child(req["argv"], req["out"], req["err"])
          children[pid] = req["id"]
          proto.write(json.dumps({"id": req["id"], "pid": pid}) + "\n")
    else:
      time.sleep(0.02)
    while children:
      pid, status = os.waitpid(-1, os.WNOHANG)
      if pid == 0:
        break
      proto.write(json.dumps({"id": children.pop(pid),
                              "rc": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
  serve()
