"""`ragjax.recipes.cached_phase`: a phase computed once, reused under the same fingerprint,
computed again under another; a phase killed before it finished is never taken as done."""

import os

import pytest
from ml_collections import ConfigDict

from ragjax.recipes.cached_phase import COLD_START_META, cached_phase, config_fields


def test_config_fields_sections_prefixes_and_skips():
  c = ConfigDict({"seed": 1, "seedling": 2, "sft": {"lr": 0.1, "log_every": 5},
                  "ur2": {"knowledge": "raw", "other": 3}, "rl": {"steps": 4}})
  assert config_fields(c, sections=("seed", "sft"), skip=("sft.log_every",)) == {
      "seed": 1, "sft.lr": 0.1}
  assert config_fields(c, prefixes=("seed", "ur2.knowledge")) == {
      "seed": 1, "seedling": 2, "ur2.knowledge": "raw"}
  assert config_fields(c, everything=True, skip=("rl.", "ur2.")) == {
      "seed": 1, "seedling": 2, "sft.lr": 0.1, "sft.log_every": 5}
  # the sampler's speed settings are never part of a fingerprint: a phase cached before
  # `sampler.shared_prefix` existed is still reused
  c.sampler = {"max_new_tokens": 64, "shared_prefix": 64}
  assert config_fields(c, sections=("sampler",)) == {"sampler.max_new_tokens": 64}


def test_compute_once_reuse_then_recompute_on_a_new_fingerprint(tmp_path):
  out, scratch = str(tmp_path / "phase"), tmp_path / "sft"
  calls = []

  def compute(value):
    def run():
      calls.append(value)
      os.makedirs(out, exist_ok=True)
      scratch.mkdir(exist_ok=True)
      return value, {"summary": {"value": value}}
    return run

  reuse = lambda stored: ("reused", stored["summary"]["value"])  # noqa: E731
  fp = {"sft.lr": 0.1, "widths": (1, 2)}
  assert cached_phase(out, fp, compute=compute(1), reuse=reuse, intact=None,
                      scratch=(str(scratch),)) == 1
  assert not scratch.exists() and os.path.exists(os.path.join(out, COLD_START_META))
  # tuples compare as the JSON lists stored
  assert cached_phase(out, dict(fp), compute=compute(2), reuse=reuse,
                      intact=None) == ("reused", 1)
  assert cached_phase(out, {**fp, "sft.lr": 0.2}, compute=compute(3), reuse=reuse,
                      intact=None) == 3
  assert calls == [1, 3]

  def killed():
    os.makedirs(out, exist_ok=True)
    raise KeyboardInterrupt
  os.remove(os.path.join(out, COLD_START_META))
  with pytest.raises(KeyboardInterrupt):
    cached_phase(out, fp, compute=killed, reuse=reuse, intact=None)
  assert not os.path.exists(os.path.join(out, COLD_START_META))
  assert cached_phase(out, fp, compute=compute(4), reuse=reuse, intact=None) == 4
