"""Shared fixtures of the services tests (no tests here): a small random Qwen2 checkpoint saved
with transformers next to a BPE tokenizer trained here with a ChatML template, the model
loaded in-process, and a ragjax chat server subprocess."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time

import requests

from _retrieval_helpers import REPO
from _xla_helpers import xla_flags
from conftest import temp_dir
from _rollout_helpers import tokenizer

MAX_PROMPT = 2048     # the UR² summary prompt with a few passages fits


@functools.lru_cache(maxsize=None)
def checkpoint_dir(chat: bool = True) -> str:
  """An HF directory: random Qwen2 (vocab = the tokenizer's, eos = <|im_end|>) + tokenizer."""
  import torch
  from transformers import Qwen2Config, Qwen2ForCausalLM
  tok = tokenizer(chat=chat)
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  torch.manual_seed(0)
  model = Qwen2ForCausalLM(Qwen2Config(
      vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
      initializer_range=0.3, eos_token_id=eos, bos_token_id=None, pad_token_id=0,
      tie_word_embeddings=True))
  d = temp_dir("services_ckpt_")
  model.float().eval().save_pretrained(d)
  tok.save_pretrained(d)
  return d


@functools.lru_cache(maxsize=None)
def local_model(chat: bool = True):
  """One in-process model per test process (its compiled samplers are shared by the tests)."""
  from ragjax.services.local import LocalChatModel
  return LocalChatModel.from_checkpoint(checkpoint_dir(chat), name="judge", max_batch=8,
                                        max_prompt_tokens=MAX_PROMPT, max_new_tokens=64)


def conversations(n: int, offset: int = 0) -> list[list[dict]]:
  return [[{"role": "system", "content": "You are a helpful assistant."},
           {"role": "user", "content": f"Who founded the Quillport Observatory? case {i}"}]
          for i in range(offset, offset + n)]


def start_chat_server(port: int, *extra: str, checkpoint: str = "", name: str = "judge",
                      max_prompt: int = MAX_PROMPT, wait: bool = True) -> subprocess.Popen:
  """`python -m ragjax.services.chat_server` on 127.0.0.1:port, returned once /health answers
  (`wait=False`: at once; `wait_for_server` then) (`checkpoint`: the random Qwen2 directory
  unless given, e.g. SmolLM2's GGUF file)."""
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = xla_flags()
  proc = subprocess.Popen(
      [sys.executable, "-m", "ragjax.services.chat_server", "--checkpoint",
       checkpoint or checkpoint_dir(), "--port", str(port), "--model-name", name,
       "--max-batch", "8", "--max-prompt-tokens", str(max_prompt), "--max-new-tokens", "64",
       *extra],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  return wait_for_server(proc, port) if wait else proc


def wait_for_server(proc: subprocess.Popen, port: int, seconds: float = 120) -> subprocess.Popen:
  """`proc` once the chat server's /health on 127.0.0.1:port answers (an error if it exits or
  `seconds` pass first)."""
  deadline = time.time() + seconds
  while time.time() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"server exited with {proc.returncode}: "
                         f"{proc.stdout.read().decode()[-2000:]}")
    try:
      if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
        return proc
    except requests.RequestException:
      time.sleep(0.2)
  proc.kill()
  raise RuntimeError(f"chat server did not come up within {seconds:.0f} s")


class ScriptedChat:
  """A `ChatModel` test double for code that *uses* a model (judges, the proxy): `reply(messages)`
  gives each answer; `calls` counts `complete` calls and `seen` keeps every conversation."""

  def __init__(self, reply):
    self.reply, self.calls, self.seen = reply, 0, []

  def complete(self, messages_list, max_tokens=256, temperature=0.0, stop=None, top_p=1.0,
               seed=None):
    self.calls += 1
    self.seen.extend(messages_list)
    return [self.reply(m) for m in messages_list]
