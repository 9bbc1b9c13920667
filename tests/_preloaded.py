"""`python -m MODULE ARGS ...` as real processes forked from one interpreter that has already
imported the third-party libraries (jax, flax, optax, orbax, torch, transformers, ...), for the
commands the tests start: a bad-input refusal spent about 2 of its 2.5 CPU seconds importing
those (tests/test_cli_errors.py: about 80 of them, 113 -> 21 s alone), a tiny training run
about 4 (two signature worlds, their refusals and the combined recipe: 150 -> 115 CPU
seconds, 2026-12-07); the whole suite went from 1,362 to 1,210 s.

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

`popen(ARGS, cwd=, env=, ...)` is `subprocess.Popen` for `ARGS = [sys.executable, "-m",
MODULE, ...]` or `[sys.executable, SCRIPT, ...]` whose output is read at the end (captured, or
written to a file), and `run` is `subprocess.run(..., capture_output=True, text=True)`: forked
from this test process's server where the environment agrees with the server's on every
variable a library reads at import (`JAX_*`, `OMP_*`, ...: `IMPORT_TIME`), a real subprocess
where it does not; each forked process takes its own environment, working directory and
`PYTHONPATH`.

Server protocol (one JSON object per line): the test writes {"id", "argv", "out", "err", and
optionally "cwd", "env", "script"}; the server answers {"id", "pid"} when it forked and
{"id", "rc"} when the process ended."""

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

# third-party modules the entry points import before they refuse bad input or start work
# (measured with `python -X importtime -m ...`); none of them starts a thread at import
# (pyarrow does: left out)
PRELOAD = ("numpy", "jax", "jax.numpy", "flax.linen", "optax", "orbax.checkpoint", "tensorstore",
           "ml_collections", "absl.app", "absl.flags", "requests", "fastapi", "starlette",
           "uvicorn", "etils.epath", "safetensors.numpy", "torch", "transformers",
           "transformers.modeling_gguf_pytorch_utils", "gguf")
# environment variables those libraries read when imported: a command whose environment
# differs from the server's in one of them runs as a plain subprocess
IMPORT_TIME = ("JAX_", "XLA_PYTHON", "TF_", "OMP_", "OPENBLAS_", "MKL_", "TOKENIZERS_", "HF_",
               "TRANSFORMERS_", "TORCH", "PYTORCH", "CUDA", "PYTHON")


class Preloaded:
  """A preloaded server (`python tests/_preloaded.py`) and the commands it forks."""

  def __init__(self, env: dict, cwd: str):
    self.dir = tempfile.mkdtemp(prefix="preloaded-")
    self.env = dict(env)
    self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], cwd=cwd, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    self.count = 0
    self.buffer = b""
    self.running = {}            # id -> ForkedProcess

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def close(self) -> None:
    """Ends the server once the processes it forked have ended (or after a minute: then the
    server is killed and those still running are left to finish alone)."""
    if self.proc.poll() is None:
      self.proc.stdin.close()
      try:
        self.proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    shutil.rmtree(self.dir, ignore_errors=True)

  def agrees(self, env: dict) -> bool:
    """Whether `env` holds the server's values of every variable read at import."""
    def read(e):
      return {k: v for k, v in e.items() if k.startswith(IMPORT_TIME) and k != "PYTHONPATH"}
    return read(env) == read(self.env)

  def drain(self, wait: float) -> bool:
    """Reads the server's next message (waiting up to `wait` seconds) and hands it to its
    process; False when none came."""
    while b"\n" not in self.buffer:
      ready, _, _ = select.select([self.proc.stdout], [], [], wait)
      if not ready:
        return False
      data = os.read(self.proc.stdout.fileno(), 65536)
      if not data:
        raise RuntimeError(f"the preloaded server exited ({self.proc.wait()})")
      self.buffer += data
    line, self.buffer = self.buffer.split(b"\n", 1)
    msg = json.loads(line)
    proc = self.running[msg["id"]]
    if "pid" in msg:
      proc.pid = msg["pid"]
    else:
      proc.returncode = msg["rc"]
      del self.running[msg["id"]]
    return True

  def fork(self, argv, cwd=None, env=None, script=None, outputs="both") -> "ForkedProcess":
    """`python -m argv[0] argv[1:]` (or `python SCRIPT argv[1:]`), forked; returns once it
    started.  `outputs`: "both" (stdout and stderr captured apart), "merged" (stderr into
    stdout, captured) or a file's path (both appended to it, nothing captured)."""
    self.count += 1
    cid = self.count
    out, err = (os.path.join(self.dir, f"{cid}.{s}") for s in ("out", "err"))
    req = dict(id=cid, argv=list(argv), out=out, err=err, cwd=cwd, env=env, script=script)
    if outputs == "merged":
      req["err"] = err = None
    elif outputs != "both":
      req.update(out=outputs, err=None, append=True)
      out = err = None
    proc = self.running[cid] = ForkedProcess(self, out, err)
    self.proc.stdin.write((json.dumps(req) + "\n").encode())
    self.proc.stdin.flush()
    while proc.pid is None:
      self.drain(wait=60)
    return proc

  def run_all(self, commands, timeout: float = 120, parallel: int = 4, report=None) -> list:
    """(exit status, stdout, stderr) of each command (`[MODULE, ARG, ...]`), `parallel` at a
    time; a command still running after `timeout` seconds is killed, its stderr then starting
    with "still running after".  `report(i, result)` is called as command i ends."""
    results = [None] * len(commands)
    todo = list(range(len(commands)))
    running = {}                 # index -> (process, start)
    while todo or running:
      while todo and len(running) < parallel:
        i = todo.pop(0)
        running[i] = (self.fork(commands[i]), time.time())
      self.drain(wait=1.0)
      for i, (proc, t0) in list(running.items()):
        if proc.returncode is None:
          if time.time() - t0 > timeout and not proc.killed:
            proc.kill()
          continue
        del running[i]
        out, err = proc.outputs()
        if proc.killed:
          err = f"still running after {timeout:g} s: " + err[-400:]
        results[i] = (proc.returncode, out, err)
        if report is not None:
          report(i, results[i])
    return results


class ForkedProcess:
  """The part of `subprocess.Popen`'s interface the tests use (stdout and stderr captured as
  text, read at the end)."""

  def __init__(self, server: Preloaded, out: str, err: str):
    self.server, self.out, self.err = server, out, err
    self.pid = None
    self.returncode = None
    self.killed = False
    self.args = None

  def poll(self):
    while self.returncode is None and self.server.drain(wait=0):
      pass
    return self.returncode

  def wait(self, timeout=None):
    deadline = None if timeout is None else time.time() + timeout
    while self.returncode is None:
      left = 1.0 if deadline is None else deadline - time.time()
      if left <= 0:
        raise subprocess.TimeoutExpired(self.args, timeout)
      self.server.drain(wait=min(left, 1.0))
    return self.returncode

  def outputs(self):
    """(stdout, stderr) as text; None for one not captured (Popen's None: stderr merged into
    stdout, or both written to a file)."""
    texts = []
    for path in (self.out, self.err):
      if path is None:
        texts.append(None)
        continue
      with open(path, errors="replace") as f:
        texts.append(f.read())
    return tuple(texts)

  def communicate(self, timeout=None):
    self.wait(timeout)
    return self.outputs()

  def kill(self):
    if self.returncode is None and self.pid is not None:
      self.killed = True
      os.kill(self.pid, 9)


SERVERS = []


def server() -> Preloaded:
  """This process's server (started at first use, in this process's environment with CPU
  JAX, as the tests' commands run)."""
  if not SERVERS:
    SERVERS.append(Preloaded(dict(os.environ, JAX_PLATFORMS="cpu"), os.getcwd()))
    import atexit
    atexit.register(SERVERS[0].close)
  return SERVERS[0]


def popen(args, cwd=None, env=None, **kw):
  """`subprocess.Popen(args, cwd=, env=, **kw)`, forked from the preloaded server where it
  can be (see the module's docstring) and `kw` is one of: stdout=PIPE, stderr=PIPE, text=True;
  stdout=PIPE, stderr=STDOUT, text=True; stdout=<an open file>, stderr=STDOUT (the output read
  at the end, by `communicate`, never streamed); anything else is a plain `subprocess.Popen`."""
  env = dict(os.environ if env is None else env)
  args = list(args)
  how = None
  if args[0] == sys.executable and len(args) > 2 and args[1] == "-m":
    how = dict(argv=args[2:])
  elif args[0] == sys.executable and len(args) > 1 and args[1].endswith(".py"):
    how = dict(argv=args[1:], script=os.path.join(cwd or os.getcwd(), args[1]))
  outputs = None
  if kw == dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True):
    outputs = "both"
  elif kw == dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True):
    outputs = "merged"
  elif (set(kw) == {"stdout", "stderr"} and kw["stderr"] == subprocess.STDOUT
        and isinstance(getattr(kw["stdout"], "name", None), str)):
    kw["stdout"].flush()
    outputs = os.path.abspath(kw["stdout"].name)           # an open file: appended to
  if how is None or outputs is None or not server().agrees(env):
    return subprocess.Popen(args, cwd=cwd, env=env, **kw)
  proc = server().fork(cwd=os.path.abspath(cwd or os.getcwd()), env=env, outputs=outputs, **how)
  proc.args = args
  return proc


def run(args, cwd=None, env=None, timeout=None, check=False, **kw):
  """`subprocess.run(args, cwd=, env=, capture_output=True, text=True, timeout=, check=)`,
  forked from the preloaded server where it can be; other arguments: `subprocess.run`."""
  if kw != dict(capture_output=True, text=True):
    return subprocess.run(args, cwd=cwd, env=env, timeout=timeout, check=check, **kw)
  proc = popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               text=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    raise
  done = subprocess.CompletedProcess(args, proc.returncode, out, err)
  if check:
    done.check_returncode()
  return done


def child(req: dict) -> None:
  """In the forked process: run `python -m argv[0] argv[1:]` (or the script) in the request's
  directory and environment, and exit as the interpreter would."""
  import atexit
  import runpy
  import threading
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if req.get("append") else os.O_TRUNC)
  out = os.open(req["out"], flags, 0o644)
  os.dup2(out, 1)
  os.dup2(os.open(req["err"], flags, 0o644) if req.get("err") else out, 2)
  if req.get("cwd"):
    os.chdir(req["cwd"])
  if req.get("env") is not None:
    os.environ.clear()
    os.environ.update(req["env"])
  # sys.path as the interpreter builds it: the script's directory (or, with -m, the working
  # directory), PYTHONPATH, then the installation's paths (the server's, without its own)
  script = req.get("script")
  given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
  sys.path[:] = ([os.path.dirname(script) if script else os.getcwd()] + given + BASE_PATH)
  sys.argv = list(req["argv"])
  code = 0
  try:
    if script:
      runpy.run_path(script, run_name="__main__")
    else:
      runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
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


BASE_PATH = []      # the server's sys.path without its script's directory and PYTHONPATH


def serve() -> None:
  """The server: preload, then fork one process per request line; report each one's end."""
  import importlib
  given = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
  BASE_PATH[:] = [p for p in sys.path[1:] if p not in given]
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
            child(req)
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
