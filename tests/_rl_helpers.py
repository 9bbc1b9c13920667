"""Shared fixtures for the RL tests: a tiny policy and a batch with retrieved blocks."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from ragjax.models.decoder import init_params
from ragjax.models.presets import get_preset
from ragjax.rl.batch import make_train_batch
from ragjax.rollout.labels import Source
from ragjax.rl.logprobs import sequence_logprobs


def tiny_cfg():
  return get_preset("tiny")


def tiny_params(seed: int = 0):
  return init_params(tiny_cfg(), jax.random.PRNGKey(seed))


def random_labels(rng: np.random.Generator, b: int, t: int) -> np.ndarray:
  """Prompt prefix, then policy text with one retrieved block, then right padding."""
  labels = np.full((b, t), Source.PAD, np.int32)
  for i in range(b):
    p = rng.integers(2, 4)
    end = rng.integers(t - 3, t + 1)
    labels[i, :p] = Source.PROMPT
    labels[i, p:end] = Source.POLICY
    r0 = rng.integers(p + 1, end - 3)
    labels[i, r0:r0 + 2] = Source.RETRIEVED
  return labels


def random_rl_batch(cfg, params, b=8, t=16, seed=0, with_ref=True):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, cfg.vocab_size, (b, t)).astype(np.int32)
  labels = random_labels(rng, b, t)
  attn = (labels != Source.PAD).astype(np.int32)
  pos = np.maximum(np.cumsum(attn, 1) - 1, 0)
  score = jax.jit(lambda p, t, q, a: sequence_logprobs(cfg, p, t, q, a)[0])
  old = score(params, jnp.asarray(tokens), jnp.asarray(pos), jnp.asarray(attn))
  old = np.asarray(old) + rng.normal(0, 0.05, (b, t)).astype(np.float32)  # slightly off-policy
  ref = np.asarray(old) + rng.normal(0, 0.1, (b, t)).astype(np.float32) if with_ref else None
  adv = rng.normal(0, 1, (b,)).astype(np.float32)
  return make_train_batch(tokens, labels, adv, old, ref_logprobs=ref)


def logged_metrics(workdir):
  """The RL metrics log of a run in `workdir`, without the wall-clock entries (what two runs
  of the same config must agree on)."""
  with open(os.path.join(workdir, "rl", "metrics.jsonl")) as f:
    rows = [json.loads(l) for l in f if l.strip()]
  return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "tokens_per_s"}
          for r in rows]
