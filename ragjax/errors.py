"""How command-line entry points report a user's mistake: one line naming the problem, no
traceback, a non-zero exit; `RAGJAX_TRACEBACK=1` shows the traceback for debugging.

User mistakes are the errors ragjax raises on purpose with a message meant for the user: bad
config fields and registry names (ValueError / KeyError), a checkpoint from another config
(`ConfigMismatchError`), missing files, bad data records (`DataError`), an unreachable service
(`RetrievalError`, `ChatServiceError`), a diverged update (`NonFiniteError`: lower the lr), a
full disk or read-only filesystem met while writing (`StorageError`).
"""

from __future__ import annotations

import contextlib
import os
import sys

class ServiceUnavailable(RuntimeError):
  """A service (retriever, judge) stayed unreachable past its deadline: a passing fault.  The
  trainer retries the step from its start (`trainer.step_retries`) instead of dying."""


class StorageError(RuntimeError):
  """Writing the run's files failed for want of room or rights (a full disk or quota, a
  read-only filesystem): the run stops at once, naming the directory; what was committed
  before (the last checkpoint) is intact, and the same command resumes once there is room."""


STORAGE_ERRNOS = (28, 30, 122)    # ENOSPC, EROFS, EDQUOT


USER_ERRORS = (ValueError, KeyError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
               PermissionError, ConnectionError, FloatingPointError)


def _is_user_error(e: BaseException) -> bool:
  name = type(e).__name__
  return (isinstance(e, USER_ERRORS + (ServiceUnavailable, StorageError))
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


# Mistakes met while `define_config_flag` defined the flag (reported by `flags_parser`).
DEFINE_ERRORS: list = []


def define_config_flag(default: str, lock_config: bool = True) -> None:
  """`--config` (an ml-collections config file).  Without `--config=` on the command line,
  ml-collections loads `default` and applies the `--config.FIELD=V` overrides while the flag is
  defined, i.e. when the entry point's module is imported, before `flags_parser` can catch
  anything; a mistake there is kept and `flags_parser` reports it as one line."""
  from ml_collections import config_flags
  try:
    config_flags.DEFINE_config_file("config", default, "experiment config (ml-collections)",
                                    lock_config=lock_config)
  except Exception as e:  # noqa: BLE001  (reported by flags_parser; the traceback on demand)
    DEFINE_ERRORS.append(e)


def flags_parser(program: str, code: int = 2):
  """`app.run(main, flags_parser=flags_parser("ragjax.train"))`: absl parses the flags (and
  ml-collections loads the `--config` file and applies `--config.FIELD=V`) before `main` runs,
  outside `exit_on_user_error`; this parser gives those mistakes one line too: a missing config
  file, a config argument the file refuses, an unknown or mistyped field."""
  def parse(argv):
    from absl import flags
    if DEFINE_ERRORS:          # the default config refused an override when it was defined
      if os.environ.get("RAGJAX_TRACEBACK"):
        raise DEFINE_ERRORS[0]
      print(f"{program}: error: {flag_error(DEFINE_ERRORS[0], argv)}", file=sys.stderr)
      sys.exit(code)
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
  if isinstance(e, AttributeError) and "'get_config'" in str(e):
    spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "")
    return (f"config file {spec.split(':', 1)[0] or 'given by --config'} defines no "
            f"get_config() (a config file is a Python module with `def get_config(arg=None)` "
            f"returning a ConfigDict)")
  if isinstance(e, AttributeError):       # ml-collections: an override of a field that is absent
    return unknown_field(e, argv)
  lines = [line.strip() for line in str(e).splitlines() if line.strip()]
  if any(line.startswith("Traceback") for line in lines):
    lines = lines[-1:]                    # absl wraps the config file's own error: its last line
  msg = " ".join(" ".join(lines).split())
  if not isinstance(e, USER_ERRORS) and type(e).__module__ != "absl.flags._exceptions":
    msg = f"{type(e).__name__}: {msg} (RAGJAX_TRACEBACK=1 shows the traceback)"
  return msg


def unknown_field(e: AttributeError, argv) -> str:
  """ml-collections' `AttributeError(KeyError("'stepz'\\nDid you mean \"steps\" ..."))` for
  `--config.sft.stepz=3` as `unknown config field 'sft.stepz' in --config.sft.stepz=3 (did you
  mean "steps"?) ...`: the path, the argument and the suggestion, without escapes."""
  while e.args and isinstance(e.args[0], BaseException):
    e = e.args[0]
  text = str(e.args[0]) if e.args else str(e)
  first, _, rest = text.partition("\n")
  key = first.strip("\"' ")
  arg = next((a for a in argv if a.startswith("--config.")
              and a.split("=", 1)[0].split(".")[-1] == key), None)
  path = arg.split("=", 1)[0].removeprefix("--config.") if arg else key
  hint = " ".join(rest.split())
  if hint.startswith("Did you mean"):
    hint = "did you mean" + hint[len("Did you mean"):].split(" instead of ")[0] + "?"
  where = f" in {arg}" if arg else ""
  hint = f" ({hint})" if hint else ""
  return (f"unknown config field {path!r}{where}{hint}; the schema and its fields: "
          f"configs/common.py")
