"""`make_engine(..., sampler=)`: engines that evaluate one policy after another share one
compiled sampler (`configs/search_r1.py:tiny`, a random policy, the real BM25 retriever)."""

import importlib.util
import os

import jax
import numpy as np
import pytest

import _rollout_helpers as h
from ragjax.models.decoder import init_params
from ragjax.wiring.components import policy_config
from ragjax.rollout.factory import make_engine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Where is Quillport", "Who founded the observatory"]


def _config():
  spec = importlib.util.spec_from_file_location(
      "search_r1_config", os.path.join(ROOT, "configs", "search_r1.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config("tiny")


def _tokens(batch):
  return [list(np.asarray(row)) for row in batch.traj.tokens]


def test_a_reused_sampler_compiles_once_and_rolls_out_as_a_fresh_one():
  c, tok, ret = _config(), h.tokenizer(), h.bm25_retriever()
  cfg = policy_config(c, tok)
  first, second = (init_params(cfg, jax.random.PRNGKey(s)) for s in (0, 1))
  a = make_engine(c, cfg, first, tok, ret, greedy=True, hooks=[], evaluation=True)
  a.run(PROMPTS, samples_per_prompt=1, seed=0)
  traced = dict(a.sampler.trace_counts)
  b = make_engine(c, cfg, second, tok, ret, greedy=True, hooks=[], evaluation=True,
                  sampler=a.sampler)
  shared = b.run(PROMPTS, samples_per_prompt=1, seed=0)
  assert b.sampler is a.sampler and dict(b.sampler.trace_counts) == traced   # nothing retraced
  fresh = make_engine(c, cfg, second, tok, ret, greedy=True, hooks=[], evaluation=True)
  assert _tokens(shared) == _tokens(fresh.run(PROMPTS, samples_per_prompt=1, seed=0))
  with pytest.raises(ValueError, match="another model, sampler config or mesh"):
    make_engine(c, cfg, second, tok, ret, greedy=False, hooks=[], sampler=a.sampler)


def test_the_cpu_attention_kernel_is_a_config_field_a_resume_may_change():
  """`--config.sampler.cpu_attention_kernel=False` reaches the engine's sampler (XLA's
  attention; that both give the same tokens is tests/test_models_cpu_attention.py's), and the
  field is not part of the checkpoint's fingerprint (it changes how, not what, the run
  computes)."""
  from ragjax.models import cpu_attention
  from ragjax.rl.run_config import config_fingerprint
  c, tok, ret = _config(), h.tokenizer(), h.bm25_retriever()
  cfg = policy_config(c, tok)
  params = init_params(cfg, jax.random.PRNGKey(0))
  assert c.sampler.cpu_attention_kernel is True
  off = _config()
  off.sampler.cpu_attention_kernel = False
  for conf, want in ((c, cpu_attention.available()), (off, False)):
    engine = make_engine(conf, cfg, params, tok, ret, greedy=True, hooks=[], evaluation=True)
    assert engine.sampler.config.cpu_attention_kernel is conf.sampler.cpu_attention_kernel
    assert engine.sampler.cpu_kernel is want
  assert config_fingerprint(c.to_dict()) == config_fingerprint(off.to_dict())
  off.sampler.temperature = 0.5               # a field that does change the run
  assert config_fingerprint(c.to_dict()) != config_fingerprint(off.to_dict())
