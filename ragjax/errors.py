"""How command-line entry points report a user's mistake: one line naming the problem, no
traceback, a non-zero exit; `RAGJAX_TRACEBACK=1` shows the traceback for debugging.

User mistakes are the errors ragjax raises on purpose with a message meant for the user: bad
config fields and registry names (ValueError / KeyError), a checkpoint from another config
(`ConfigMismatchError`), missing files, bad data records (`DataError`), an unreachable service
(`RetrievalError`, `ChatServiceError`), a diverged update (`NonFiniteError`: lower the lr).
"""

from __future__ import annotations

import contextlib
import os
import sys

class ServiceUnavailable(RuntimeError):
  """A service (retriever, judge) stayed unreachable past its deadline: a passing fault.  The
  trainer retries the step from its start (`trainer.step_retries`) instead of dying."""


USER_ERRORS = (ValueError, KeyError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
               PermissionError, ConnectionError, FloatingPointError)


def _is_user_error(e: BaseException) -> bool:
  name = type(e).__name__
  return (isinstance(e, USER_ERRORS + (ServiceUnavailable,))
          or name in ("RetrievalError", "ChatServiceError"))


@contextlib.contextmanager
def exit_on_user_error(program: str, code: int = 2):
  try:
    yield
  except Exception as e:  # noqa: BLE001  (re-raised unless it is a user's mistake)
    if os.environ.get("RAGJAX_TRACEBACK") or not _is_user_error(e):
      raise
    msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    print(f"{program}: error: {' '.join(msg.split())}", file=sys.stderr)
    sys.exit(code)


def flags_parser(program: str, code: int = 2):
  """`app.run(main, flags_parser=flags_parser("ragjax.train"))`: absl parses the flags (and
  ml-collections loads the `--config` file and applies `--config.FIELD=V`) before `main` runs,
  outside `exit_on_user_error`; this parser gives those mistakes one line too: a missing config
  file, a config argument the file refuses, an unknown or mistyped field."""
  def parse(argv):
    from absl import flags
    try:
      missing = [a for a in argv[1:] if a.startswith("--config=")
                 and not os.path.exists(a.split("=", 1)[1].split(":", 1)[0])]
      if missing:
        raise FileNotFoundError(f"config file not found: {missing[0].split('=', 1)[1]}")
      return flags.FLAGS(argv)
    except Exception as e:  # noqa: BLE001  (every flag mistake is the user's; traceback on demand)
      if os.environ.get("RAGJAX_TRACEBACK"):
        raise
      print(f"{program}: error: {flag_error(e, argv)}", file=sys.stderr)
      sys.exit(code)
  return parse


def flag_error(e: BaseException, argv) -> str:
  """One line for an exception raised while parsing the command line."""
  if isinstance(e, AttributeError):       # ml-collections: an override of a field that is absent
    key = str(e).strip("\"' ")
    arg = next((a for a in argv if a.startswith("--config.") and key in a.split("=", 1)[0]),
               key)
    return (f"unknown config field in {arg!r}: the config has no {key!r} (the schema and its "
            f"fields: configs/common.py)")
  lines = [line.strip() for line in str(e).splitlines() if line.strip()]
  if any(line.startswith("Traceback") for line in lines):
    lines = lines[-1:]                    # absl wraps the config file's own error: its last line
  msg = " ".join(" ".join(lines).split())
  if not isinstance(e, USER_ERRORS) and type(e).__module__ != "absl.flags._exceptions":
    msg = f"{type(e).__name__}: {msg} (RAGJAX_TRACEBACK=1 shows the traceback)"
  return msg
