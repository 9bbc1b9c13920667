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
