"""One model-service shape: every model a config names (`judge`, `eval.judge`, R3-RAG's
`teacher`, UR²'s summarisers) is a `chat_service` section, built by one reader
(`ragjax.wiring.chat_services.make_chat`); kind "auto" keeps `--config.eval.judge.url=...`
(and the summarisers' `.url` / `.checkpoint`) switching a service on by itself."""

import os
import sys

import pytest

from ragjax.services.http_client import OpenAIChatClient
from ragjax.wiring.chat_services import (ALL_KINDS, MODEL_KINDS, check_chat, eval_chat,
                                         make_chat)
from ragjax.wiring.config_files import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
from common import chat_service  # noqa: E402  (configs/common.py)
SECTIONS = ("judge", "teacher", "eval.judge", "ur2.knowledge.summariser",
            "ur2.knowledge.math_summariser")
CONFIGS = ("search_r1.py:tiny", "rezero.py:tiny", "r3_rag.py:tiny", "r3_rag.py:qwen2.5-7b",
           "ur2.py:tiny", "ur2.py:qwen2.5-7b-math-qa", "rex_rag.py:qwen2.5-3b")


def _section(c, path):
  for part in path.split("."):
    if c is None or part not in c:
      return None
    c = c[part]
  return c


@pytest.mark.parametrize("name", CONFIGS)
def test_every_model_service_is_a_chat_service(name):
  c = load_config(os.path.join(ROOT, "configs", name))
  shape = set(chat_service())
  found = [p for p in SECTIONS if _section(c, p) is not None]
  assert "judge" in found and "eval.judge" in found
  for path in found:
    assert set(_section(c, path)) - {"world"} == shape, path
    assert _section(c, path).kind in ALL_KINDS, path


def test_the_evaluation_judge_is_auto_and_read_by_make_chat(tmp_path):
  c = load_config(os.path.join(ROOT, "configs", "r3_rag.py:qwen2.5-7b"))
  assert c.eval.judge.kind == "auto" and eval_chat(c) is None     # no url: acc not computed
  c.eval.judge.url = "http://127.0.0.1:9/v1"
  c.eval.judge.cache = str(tmp_path / "judge.jsonl")
  chat, name = eval_chat(c)
  assert isinstance(chat, OpenAIChatClient) and chat.cache is not None
  assert (chat.model, chat.max_retries, name) == (
      "Qwen2.5-72B-Instruct", 8, "Qwen2.5-72B-Instruct at http://127.0.0.1:9/v1")
  c.eval.judge.model = ""
  with pytest.raises(ValueError, match=r"eval.judge.url needs eval.judge.model"):
    eval_chat(c)
  c.eval.judge.update(dict(kind="", model="m"))                   # switched off by its kind
  assert eval_chat(c) is None
  c.eval.judge.kind = "base"
  with pytest.raises(ValueError, match=r"eval.judge.kind='base': use one of"):
    eval_chat(c)


def test_the_summarisers_are_read_by_the_same_function():
  c = load_config(os.path.join(ROOT, "configs", "ur2.py:qwen2.5-7b-math-qa"))
  path = "ur2.knowledge.summariser"
  assert check_chat(c, path, MODEL_KINDS) == ""                   # named, not reachable
  c.ur2.knowledge.summariser.url = "http://127.0.0.1:9/v1"
  chat = make_chat(c, path, MODEL_KINDS)
  assert isinstance(chat, OpenAIChatClient) and chat.model == "gpt-4.1-mini-2025-04-14"
  c.ur2.knowledge.summariser.checkpoint = "/nowhere"              # url first, as before
  assert check_chat(c, path, MODEL_KINDS) == "url"
  c.ur2.knowledge.summariser.kind = "checkpoint"
  with pytest.raises(ValueError, match="does not exist"):
    make_chat(c, path, MODEL_KINDS)


def test_checkpoints_load_in_process_with_each_sections_sizes():
  """eval.judge and a summariser on an HF checkpoint: the same reader, each section's sizes
  (the summariser's max_new_tokens 0 asks the template's budget; in process at most 512)."""
  from test_services_fixtures import checkpoint_dir
  from ragjax.services.local import LocalChatModel
  c = load_config(os.path.join(ROOT, "configs", "ur2.py:qwen2.5-7b-math-qa"))
  c.eval.judge.checkpoint = c.ur2.knowledge.summariser.checkpoint = checkpoint_dir()
  chat, name = eval_chat(c)
  assert isinstance(chat, LocalChatModel) and name.endswith(" (in process)")
  assert (chat.max_prompt_tokens, chat.max_new_tokens, chat.max_batch) == (4096, 512, 16)
  summ = make_chat(c, "ur2.knowledge.summariser", MODEL_KINDS)
  assert (summ.max_prompt_tokens, summ.max_new_tokens) == (8192, 512)
