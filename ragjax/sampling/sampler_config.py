"""What the sampler is asked to do: shapes (buckets, budget, cache), sampling, stops.

Every field that fixes an array shape is here, so one config means a fixed, small set of
compiled programs: one prefill per (prompt count, samples per prompt, prompt bucket), one decode
per (batch size, attention window), one extend per (batch size, extend bucket, window).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np

# Why a row's turn ended (TurnOutput.stop_reason).
NOT_RUN = 0      # the row was finished (eos, cache full, set_done) before the turn began
STOP = 1         # a stop string ended exactly at the last returned token
EOS = 2          # an end-of-sequence token was sampled (it is returned)
BUDGET = 3       # the per-turn token budget was spent
CACHE_FULL = 4   # no cache slot left for another token
PAUSED = 5       # a step-capped call ended with the row mid-turn (the next call resumes it)
STOP_REASONS = {NOT_RUN: "not_run", STOP: "stop", EOS: "eos", BUDGET: "budget",
                CACHE_FULL: "cache_full", PAUSED: "paused"}


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """Static shapes and sampling settings of a `Sampler`.

  `max_new_tokens` is the per-turn budget: a turn (one `decode` call, or several step-capped
  ones) returns at most this many tokens per row.  `cache_dtype=None` means bfloat16 on accelerators and the model's compute dtype on
  CPU.  `eos_ids=None` takes the model config's eos ids.  With `forbid_stop_overhang` a token
  that would complete a stop string and run past its end (e.g. `>\\n` after `</search`) is
  masked out of the sampling distribution, so generation always ends exactly at the tag.
  """
  max_cache_length: int = 1024
  max_new_tokens: int = 128
  prompt_buckets: tuple[int, ...] = (32, 64, 128, 256, 512)
  extend_buckets: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
  temperature: float = 1.0
  # A per-sample ladder: sample g of each prompt draws at temperatures[g % len]; () = every row
  # at `temperature` (R3-RAG: 0.1, 0.4, 0.7, 1.0 for its 4 samples).
  temperatures: tuple[float, ...] = ()
  top_p: float = 1.0
  top_k: int = 0
  # Nucleus sampling without top_k looks for the nucleus among each row's this many most
  # likely tokens (one top-k), and sorts the whole vocabulary only for the rows whose nucleus
  # is larger (`ragjax.sampling.sample`).  The draw is the same either way.
  nucleus_candidates: int = 1024
  greedy: bool = False
  cache_dtype: Optional[str] = None
  stop_strings: tuple[str, ...] = ()
  eos_ids: Optional[tuple[int, ...]] = None
  pad_id: int = 0
  forbid_stop_overhang: bool = True
  # Attention windows: a call attends to the smallest of these that holds every live row's
  # end (None: powers of two from 64 below max_cache_length; () : always the whole cache).
  attend_buckets: Optional[tuple[int, ...]] = None
  # Cached attention (decode, extend) in ragjax's C++ kernel on an unsharded CPU, reading each
  # row's keys and values only up to its length (`ragjax.models.cpu_attention`; built at first
  # use, XLA's attention when it cannot be).  False: XLA's attention everywhere.
  cpu_attention_kernel: bool = True
  # The sampler runs on a fused copy of the weights (ragjax.models.fused: one matmul for the
  # queries, keys and values, one for the MLP's gate and up), built whenever they are set.
  # None: on accelerators (fewer, larger kernels per layer), off on CPU (no faster there;
  # docs/benchmarks/gpu.md, "GPU speed levers"), and off under a mesh whose tensor axis would split
  # the query heads but not the KV heads (the fused kernel is grouped by KV head).
  fused_projections: Optional[bool] = None
  # A decode step's attention: "xla" (XLA's products and softmax) or "pallas" (one Pallas
  # kernel per row and KV head over the row's own length, ragjax.models.pallas_decode: Triton
  # on GPUs, interpret mode on CPU; windows that are not a power of two >= 64 use XLA's).
  decode_attention: str = "xla"
  # Run a scanned model (`model.scan_layers`: stacked params, one compiled layer for training)
  # with its layers unrolled over a per-layer cache, the weights unstacked once per
  # `set_params`: on a CPU the stacked cache costs a copy of each layer's slice every step
  # (SmolLM2-135M's greedy rollout of 8 questions: 134 s stacked, 75 s unrolled,
  # docs/real_model.md).  No effect on a model without `scan_layers`.
  unroll_layers: bool = False
  # Prompts that start alike (an instruction and a worked example before each question) share
  # one forward of their common head: cut to a multiple of this many tokens, run once, its
  # cache copied to every prompt's row; each prompt's own tail, padded to a multiple of it,
  # runs after (`ragjax.sampling.prefill`).  0: off.  Only for two or more prompts whose head
  # is at least this long, on an unsharded sampler.  SmolLM2's 400 test prompts share 403 of
  # their 419-445 tokens: one batch of 50 runs about 3,600 tokens instead of 25,600.
  shared_prefix: int = 0

  def __post_init__(self):
    if self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
    for name in ("prompt_buckets", "extend_buckets"):
      buckets = getattr(self, name)
      if not buckets or list(buckets) != sorted(set(buckets)) or buckets[0] < 1:
        raise ValueError(f"{name} must be a non-empty strictly increasing tuple of positive "
                         f"ints, got {buckets!r}")
      if buckets[-1] > self.max_cache_length:
        raise ValueError(f"{name} {buckets!r} exceeds max_cache_length={self.max_cache_length}")
    if not self.greedy and self.temperature <= 0:
      raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got "
                       f"{self.temperature}")
    if not self.greedy and any(not t > 0 for t in self.temperatures):
      raise ValueError(f"temperatures must all be > 0, got {self.temperatures!r}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.shared_prefix < 0:
      raise ValueError(f"shared_prefix must be >= 0 (0 = off), got {self.shared_prefix}")
    if self.nucleus_candidates < 1:
      raise ValueError(f"nucleus_candidates must be >= 1, got {self.nucleus_candidates}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
    if self.attend_buckets is not None and (
        list(self.attend_buckets) != sorted(set(self.attend_buckets))
        or any(not 0 < w <= self.max_cache_length for w in self.attend_buckets)):
      raise ValueError(f"attend_buckets must be strictly increasing and within "
                       f"(0, max_cache_length={self.max_cache_length}], got "
                       f"{self.attend_buckets!r}")
    if self.decode_attention not in ("xla", "pallas"):
      raise ValueError(f"decode_attention must be 'xla' or 'pallas', got "
                       f"{self.decode_attention!r}")
    if any(not s for s in self.stop_strings):
      raise ValueError(f"stop_strings may not contain an empty string: {self.stop_strings!r}")

  def row_temperatures(self, prompts: int, samples: int) -> np.ndarray:
    """[prompts * samples] float32: each prompt-major row's sampling temperature."""
    ladder = self.temperatures or (self.temperature,)
    g = np.arange(prompts * samples) % samples
    return np.asarray([ladder[i % len(ladder)] for i in g], np.float32)

  def replace(self, **kw) -> "SamplerConfig":
    return dataclasses.replace(self, **kw)

  def attend_window(self, n: int) -> int:
    """Cache slots a call must attend to when its live rows end at slot n - 1 at most."""
    buckets = self.attend_buckets
    if buckets is None:
      buckets, w = [], 64
      while w < self.max_cache_length:
        buckets.append(w)
        w *= 2
    for w in buckets:
      if n <= w:
        return w
    return self.max_cache_length

  def resolved_cache_dtype(self, model_dtype: str) -> str:
    if self.cache_dtype is not None:
      return self.cache_dtype
    return model_dtype if jax.default_backend() == "cpu" else "bfloat16"
