"""Test-wide settings: 8 fake CPU devices so sharded paths are testable, float32 matmuls."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared")
SHARED_DATA = os.path.abspath(os.path.join(SHARED, "data"))


# The end-to-end files run first, so under `pytest -n 2 --dist loadfile` the many short files
# fill the tail of both workers instead of one long file running alone at the end.
HEAVY_FIRST = ("test_recipe_r3_rag.py", "test_recipe_ur2.py", "test_world_default.py",
               "test_multihost.py", "test_recipe_search_r1.py", "test_recipe_autorefine_rezero.py",
               "test_recipe_rex_rag.py", "test_rl_resume.py", "test_eval_suite.py",
               "test_rl_trainer.py", "test_rl_train_step.py", "test_models_decoder.py")


def pytest_collection_modifyitems(session, config, items):
  rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
  items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))
