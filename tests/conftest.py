"""Test-wide settings: 8 fake CPU devices so sharded paths are testable, float32 matmuls, and
one persistent JAX compilation cache for the whole run (both xdist workers and every
subprocess a test starts inherit it), so a program compiled by one test is loaded by the next."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")   # the same in both workers of one run
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ   # made here: removed at the end
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"ragjax-tests-jax-cache-{_RUN}")
                      if _RUN else tempfile.mkdtemp(prefix="ragjax-tests-jax-cache-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared")
SHARED_DATA = os.path.abspath(os.path.join(SHARED, "data"))



def pytest_addoption(parser):
  parser.addoption("--fuzz-count", type=int, default=150,
                   help="generated policy turns per protocol in tests/test_rollout_fuzz.py "
                        "(RELIABILITY.md's full run: 10000)")


def pytest_sessionfinish(session, exitstatus):
  """The run's compilation cache goes when the run ends (in the controller, after every xdist
  worker; a cache the caller named stays)."""
  if _OWN_CACHE and not hasattr(session.config, "workerinput"):
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def temp_dir(prefix: str) -> str:
  """A temporary directory removed when the test process exits (for cached helpers that have
  no `tmp_path`)."""
  d = tempfile.mkdtemp(prefix=prefix)
  atexit.register(shutil.rmtree, d, True)
  return d
