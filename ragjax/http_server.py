"""Running an HTTP app (`/retrieve`, chat completions) from a command line.

The socket is bound here, before uvicorn starts, so `--port 0` (any free port) is usable: the
address actually listened on is printed (`<program>: listening on http://127.0.0.1:40533`),
and a port already taken is one `error:` line instead of uvicorn's log and exit status 1.
"""

from __future__ import annotations

import socket
import sys


def bind(host: str, port: int, program: str) -> socket.socket:
  """A listening TCP socket on host:port; exits 2 with one line when it cannot be had."""
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  sock = socket.socket(family, socket.SOCK_STREAM)
  try:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
  except OSError as e:
    sock.close()
    print(f"{program}: error: cannot listen on {host}:{port}: {e.strerror or e}",
          file=sys.stderr)
    sys.exit(2)
  return sock


def serve(app, host: str, port: int, program: str) -> None:
  """Serves `app` on host:port until interrupted (see the module docstring)."""
  import uvicorn
  sock = bind(host, port, program)
  bound = sock.getsockname()[1]
  shown = f"[{host}]" if ":" in host else host
  print(f"{program}: listening on http://{shown}:{bound}", flush=True)
  uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
