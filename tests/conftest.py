"""Test-wide settings: 8 fake CPU devices so sharded paths are testable, float32 matmuls, and
one persistent JAX compilation cache for the whole run (both xdist workers and every
subprocess a test starts inherit it), so a program compiled by one test is loaded by the next."""

import atexit
import os
import shutil
import tempfile

from _xla_helpers import xla_flags  # noqa: E402  (tests/ is on the path: rootdir conftest)

os.environ.setdefault("XLA_FLAGS", xla_flags(8))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One directory per run for the compilation cache and helpers' temp dirs: made by the
# controller and inherited by the xdist workers and by every subprocess a test starts (through
# the environment); the controller removes it when the run ends (xdist workers skip atexit).
_MADE_HERE = "RAGJAX_TEST_RUN_DIR" not in os.environ
if _MADE_HERE:
  os.environ["RAGJAX_TEST_RUN_DIR"] = tempfile.mkdtemp(prefix="ragjax-tests-")
_RUN_DIR = os.environ["RAGJAX_TEST_RUN_DIR"]
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_RUN_DIR, "jax-cache"))
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


# The files that take longest, most first (seconds of one worker in a clean-clone run,
# 2026-12-07 afternoon: the real-model module ~620, the signature worlds ~400, the bad-input
# commands ~215, multi-host ~190, the synthetic-world recipes, GPU-check and evaluation-suite
# files 90-140 each; since the tests' commands fork from a preloaded interpreter the
# bad-input commands take ~45 s, but they stay third: moved down to their place, one run took
# 1,334 s against 1,210 s in this order, multi-host's setup 88 s against 60 s).
# `--dist loadfile` hands files to the two workers in collection order (with xdist's
# reordering by test count turned off in pytest_configure: it put these few-test files last),
# so they start first and the run ends on short files, not with one worker alone on a long one.
LONG_FILES = ("test_recipe_smollm2.py", "test_signature_worlds.py", "test_cli_errors.py",
              "test_multihost.py", "test_recipe_r3_rag.py", "test_recipe_ur2.py",
              "test_bench_gpu.py", "test_recipe_search_r1.py", "test_eval_suite.py",
              "test_world_default.py", "test_models_gguf.py", "test_recipe_autorefine_rezero.py",
              "test_rl_trainer.py", "test_recipe_rex_rag.py", "test_compare.py",
              "test_rl_resume.py", "test_rollout_sampler.py", "test_rl_train_step.py",
              "test_models_decoder.py")


def pytest_configure(config):
  if hasattr(config.option, "loadscopereorder"):      # pytest-xdist present
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
  """Long files first (see LONG_FILES); the rest keep their order."""
  rank = {name: i for i, name in enumerate(LONG_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


def pytest_sessionfinish(session, exitstatus):
  """The run's directory (compilation cache, helpers' temp dirs) goes when the run ends, in
  the controller, after every xdist worker."""
  if _MADE_HERE and not hasattr(session.config, "workerinput"):
    shutil.rmtree(_RUN_DIR, ignore_errors=True)


def temp_dir(prefix: str) -> str:
  """A temporary directory inside the run's directory (for cached helpers that have no
  `tmp_path`); removed with it at the end of the run, or at exit of a lone process."""
  d = tempfile.mkdtemp(prefix=prefix, dir=_RUN_DIR)
  atexit.register(shutil.rmtree, d, True)
  return d
