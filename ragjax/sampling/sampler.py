"""The sampler the rollout engine calls: prefill, decode a turn, extend, and row edits.

    sampler = Sampler(cfg, params, tokenizer, SamplerConfig(stop_strings=("</search>",)))
    state = sampler.prefill(prompt_token_lists, samples_per_prompt=G, seed=0)
    state, out = sampler.decode(state)          # out.tokens/lengths/logprobs/stop_reason
    state = sampler.extend(state, rows, observation_token_lists)
    state, out = sampler.decode(state)          # continues after the observation

Rows are prompt-major: row p * G + g is sample g of prompt p.  Every method takes a state and
returns a new one; `decode`, `extend`, `truncate` and `clone_rows` donate the old state, so do
not reuse it.  Shapes are static per (batch, bucket): prompts pad to `prompt_buckets`,
observations to `extend_buckets`, a turn returns `max_new_tokens` columns, and the cache has
`max_cache_length` slots, so turns and same-bucket batches never recompile
(`trace_counts` counts traces per function for tests).

* `prefill(prompts, samples_per_prompt, seed)`: one forward per prompt; the G samples share
  it (cache copied).  Sample g of a prompt draws at `temperatures[g]` when the config gives a
  ladder (R3-RAG's 0.1 / 0.4 / 0.7 / 1.0), else at `temperature`.  Row b's PRNG key is
  fold_in(PRNGKey(seed), first_row + b); each step folds in the row's length, so a row's
  samples depend only on (seed, row, position), also when a batch is rolled out in waves
  (`first_row`: the wave's first row in the batch).
* `decode(state, steps=None)`: one jitted while_loop (see `ragjax.sampling.decode`); with
  `steps` it stops after that many tokens and rows still mid-turn come back PAUSED, to be
  resumed by the next call under the same per-turn budget (the engine's `decode_chunk`).  Prefill, decode and
  extend attend only to the cache slots in use, rounded up to `attend_buckets`, so a short
  turn in a long cache does not pay for the whole cache (one program per window).  The
  per-layer cache (`scan_layers=False`) is itself only as wide as that window and grows
  through the windows as rows lengthen (`grow_cache`; a sliced window would be copied every
  step); the stacked cache is allocated at `max_cache_length` and windows are sliced.
* `extend(state, rows, token_lists)`: appends tokens at each row's own length, runs them
  through the model into the cache (no re-prefill of the history) and reopens the rows.  When
  the rows fit in a power-of-two count under half the batch, only they run: they are cut out
  of the state, extended and written back (`ragjax.sampling.rows.take` / `put`), so an
  extend costs what its rows need, not the whole batch (unsharded samplers only).
* `set_done(state, rows)`: the rows stop decoding until extended or truncated.
* `refill(state, rows, prompts, samples_per_prompt, seed, first_row)`: rows that finished
  take the G samples of new prompts (continuous batching): one forward per prompt, then each
  row gets the prompt's cache and the key and temperature it would have in one big prefill
  (row first_row + i of the batch), so refilled rows sample what one big wave would.
* `clone_rows(state, src_rows, dst_rows)`: dst rows become copies of src rows (cache,
  history, length), with fresh keys.
* `truncate(state, rows, new_lengths)`: drops the end of rows' histories (REX-RAG's cut
  before the answer); recomputes their next-token logits with a one-token forward.
* `set_params(params)`: weight sync from the trainer (same shapes, no recompile); with
  `fused_projections` (on for accelerators) the calls run on a fused copy of each layer's
  q/k/v and gate/up projections (`ragjax.models.fused`) built here, while `params` stay
  in transformers' layout.
"""

from __future__ import annotations

import collections
import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from ragjax.models import kv_cache
from ragjax.models.config import DecoderConfig
from ragjax.models.fused import shared_fused_copy
from ragjax.models.sharded import decoder_shardings
from ragjax.parallel.shard import batch_axis_size, shard_params
from ragjax.sampling import decode as decode_lib
from ragjax.sampling import prefill as prefill_lib
from ragjax.sampling import layout
from ragjax.sampling import rows as rows_lib
from ragjax.sampling.config import SamplerConfig, pick_bucket
from ragjax.sampling.layout import constrain_cache, rows_sharding
from ragjax.sampling.state import SamplerState, TurnOutput
from ragjax.sampling.stops import compile_stop_strings, token_bytes


class Sampler:
  """Jitted prefill / decode / extend over one model; see the module docstring."""

  def __init__(self, cfg: DecoderConfig, params, tokenizer=None,
               config: SamplerConfig = SamplerConfig(), mesh: Optional[Mesh] = None):
    self.cfg, self.config, self.mesh = cfg, config, mesh
    self.eos_ids = tuple(config.eos_ids if config.eos_ids is not None else cfg.eos_ids)
    self.cache_dtype = config.resolved_cache_dtype(cfg.dtype)
    self.stop_table = None
    self.stops = None
    if config.stop_strings:
      if tokenizer is None:
        raise ValueError(f"stop_strings {config.stop_strings!r} need a tokenizer to compile")
      self.stops = compile_stop_strings(config.stop_strings,
                                        token_bytes(tokenizer, cfg.vocab_size))
      self.stop_table = self._replicate(jnp.asarray(self.stops.table))
    self.fused = layout.fused_projections(mesh, cfg.num_kv_heads, config.fused_projections)
    self._param_shardings = self._run_shardings = None
    if mesh is not None:
      self._param_shardings = decoder_shardings(cfg, mesh)
      self._run_shardings = decoder_shardings(cfg, mesh, fused=True) if self.fused else None
    self.set_params(params)
    # A per-layer cache is kept as wide as the window its rows need and grown through the
    # windows, so every call attends it whole: a window sliced out of a wider array is copied
    # before the dot each step (bench.decode_attention).  A stacked cache (scan_layers) is
    # allocated whole and each call slices its window.
    self.grow_cache = not cfg.scan_layers
    self.cpu_kernel = layout.cpu_kernel(mesh, config.cpu_attention_kernel)
    self.trace_counts: collections.Counter = collections.Counter()
    self._prefill = jax.jit(self._counted("prefill", self._prefill_fn),
                            static_argnames=("samples", "cache_length", "cache_width"))
    self._decode = jax.jit(self._counted("decode", self._decode_fn), donate_argnums=(2,),
                           static_argnames=("window", "steps"))
    self._extend = jax.jit(self._counted("extend", self._extend_fn), donate_argnums=(1,),
                           static_argnames=("window",))
    self._extend_rows = jax.jit(self._counted("extend_rows", self._extend_rows_fn),
                                donate_argnums=(1,), static_argnames=("window",))
    self._truncate = jax.jit(self._counted("truncate", self._truncate_fn), donate_argnums=(1,))
    self._clone = jax.jit(self._counted("clone", self._clone_fn), donate_argnums=(0,))
    self._set_done = jax.jit(self._counted("set_done", rows_lib.set_done), donate_argnums=(0,))
    self._place = jax.jit(self._counted("place", self._place_fn), donate_argnums=(0,))
    self._grow = jax.jit(self._counted("grow", self._grow_fn), static_argnames=("slots",))

  # ---- jitted bodies (pure) ----
  def _counted(self, name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kw):
      self.trace_counts[name] += 1          # runs at trace time only
      return fn(*args, **kw)
    return wrapper

  def _prefill_fn(self, params, tokens, lengths, seed, temperature, first_row, *, samples,
                  cache_length, cache_width):
    return prefill_lib.prefill(
        self.cfg, params, tokens, lengths, seed, temperature, first_row=first_row,
        samples=samples, cache_length=cache_length, cache_dtype=self.cache_dtype,
        num_stops=0 if self.stops is None else self.stops.num_stops, mesh=self.mesh,
        cache_width=cache_width, cpu_kernel=self.cpu_kernel, fused=self.fused)

  def _grow_fn(self, cache, *, slots):
    return constrain_cache(kv_cache.grow(cache, slots), self.mesh)

  def _decode_fn(self, params, stop_table, state, *, window, steps):
    return decode_lib.decode_turn(self.cfg, self.config, self.eos_ids, params, stop_table,
                                  state, mesh=self.mesh, window=window, steps=steps,
                                  cpu_kernel=self.cpu_kernel, fused=self.fused,
                                  pallas_decode=self.config.decode_attention == "pallas")

  def _extend_fn(self, params, state, tokens, counts, *, window):
    return prefill_lib.extend(self.cfg, params, state, tokens, counts, mesh=self.mesh,
                              window=window, cpu_kernel=self.cpu_kernel, fused=self.fused)

  def _extend_rows_fn(self, params, state, src, dst, tokens, counts, *, window):
    part = prefill_lib.extend(self.cfg, params, rows_lib.take(state, src), tokens, counts,
                              window=window, cpu_kernel=self.cpu_kernel, fused=self.fused)
    return rows_lib.put(state, dst, part)

  def _truncate_fn(self, params, state, new_lengths, chosen):
    return rows_lib.truncate(self.cfg, params, state, new_lengths, chosen, mesh=self.mesh,
                             cpu_kernel=self.cpu_kernel, fused=self.fused)

  def _place_fn(self, state, fresh, dst, src, batch_rows, seed, temperature):
    return rows_lib.place(state, fresh, dst, src, batch_rows, seed, temperature, mesh=self.mesh)

  def _clone_fn(self, state, source):
    return rows_lib.clone(state, source, mesh=self.mesh)

  # ---- host API (ragjax.rollout.policy.Policy) ----
  chunked_decode = True         # `decode(state, steps=k)` pauses rows mid-turn
  @property
  def stop_strings(self) -> tuple[str, ...]:
    return tuple(self.config.stop_strings)

  @property
  def max_extend(self) -> int:
    """Most tokens one `extend` call takes (the largest extend bucket)."""
    return int(self.config.extend_buckets[-1])

  @property
  def max_prompt_len(self) -> int:
    """Longest prompt `prefill` takes (the largest prompt bucket)."""
    return int(self.config.prompt_buckets[-1])

  @property
  def row_multiple(self) -> int:
    """Row counts that are a multiple of this stay sharded over the mesh's batch devices."""
    return 1 if self.mesh is None else batch_axis_size(self.mesh)

  @property
  def run_params(self):
    """The weights the compiled calls run on: `params`, or their fused copy."""
    return self._run_params

  def set_params(self, params) -> None:
    """Installs (and, under a mesh, shards) the weights the sampler decodes with.  `params`
    (transformers' layout) stay readable as `self.params`; with fused projections the calls
    run on a fused copy of the attention and MLP input projections (ragjax.models.fused),
    one per weights, shared with other samplers over the same ones."""
    if self._param_shardings is not None:
      params = shard_params(params, self._param_shardings)
    self.params = params
    self._run_params = params
    if self.fused:
      place = None
      if self._run_shardings is not None:
        place = functools.partial(shard_params, shardings=self._run_shardings)
      self._run_params = shared_fused_copy(self.cfg, params, place, self.mesh)

  def prefill(self, prompts: Sequence[Sequence[int]], samples_per_prompt: int = 1,
              seed: int = 0, first_row: int = 0) -> SamplerState:
    return self._prefill_prompts(prompts, samples_per_prompt, seed, first_row,
                                 self.config.max_cache_length)

  def _prefill_prompts(self, prompts, samples_per_prompt, seed, first_row, cache_length):
    """`prefill` into a cache of `cache_length` slots (a refill's prompts need only their
    bucket's: the rows they go to already hold a full cache)."""
    if not prompts:
      raise ValueError("prefill needs at least one prompt")
    if samples_per_prompt < 1:
      raise ValueError(f"samples_per_prompt must be >= 1, got {samples_per_prompt}")
    lens = [len(p) for p in prompts]
    for i, n in enumerate(lens):
      if n == 0:
        raise ValueError(f"prompt {i} is empty")
    width = max(pick_bucket(self.config.prompt_buckets, n, f"prompt {i}")
                for i, n in enumerate(lens))
    tokens = np.full((len(prompts), width), self.config.pad_id, np.int32)
    for i, p in enumerate(prompts):
      tokens[i, :len(p)] = self._check_ids(p, f"prompt {i}")
    temps = self.config.row_temperatures(len(prompts), samples_per_prompt)
    cache_length = cache_length or width
    cache_width = cache_length
    if self.grow_cache:         # room for the prompts and a first turn; grown as rows need
      cache_width = min(cache_length, max(width, self.config.attend_window(
          width + self.config.max_new_tokens)))
    return self._prefill(self._run_params, self._rows(tokens),
                         self._rows(np.asarray(lens, np.int32)), jnp.uint32(seed),
                         self._rows(temps), jnp.uint32(first_row),
                         samples=samples_per_prompt, cache_length=cache_length,
                         cache_width=cache_width)

  def _fit(self, state: SamplerState, end: int) -> tuple[SamplerState, Optional[int]]:
    """(state, window) for a call whose rows end before slot `end`: a growing cache is widened
    to the window holding `end` and attended whole (window None); a full-length one is
    attended through the window."""
    window = self.config.attend_window(end)
    if not self.grow_cache:
      return state, window
    if window > kv_cache.width(state.cache):
      state = state.replace(cache=self._grow(state.cache, slots=window))
    return state, None

  def decode(self, state: SamplerState,
             steps: Optional[int] = None) -> tuple[SamplerState, TurnOutput]:
    """The live rows' next turn, or its next `steps` tokens (rows still mid-turn then come
    back PAUSED and the next call resumes them)."""
    state, window, steps = self._decode_args(state, steps)
    return self._decode(self._run_params, self.stop_table, state, window=window, steps=steps)

  def lower_decode(self, state: SamplerState, steps: Optional[int] = None) -> jax.stages.Lowered:
    """The program `decode(state, steps)` runs, lowered and not run (the state is not
    donated): `.compile().as_text()` is the optimised HLO, where the tests check that the KV
    cache is updated in place and count the fusions of a decode step."""
    state, window, steps = self._decode_args(state, steps)
    return self._decode.lower(self._run_params, self.stop_table, state, window=window, steps=steps)

  def _decode_args(self, state, steps):
    """(state fitted to the call's window, window, steps or None for the whole budget)."""
    budget = self.config.max_new_tokens
    if steps is not None and steps < 1:
      raise ValueError(f"decode steps must be >= 1, got {steps}")
    steps = budget if steps is None else min(int(steps), budget)
    lens, done = np.asarray(state.lengths), np.asarray(state.finished)
    end = int(lens[~done].max()) + steps if (~done).any() else 1
    state, window = self._fit(state, end)
    return state, window, None if steps == budget else steps

  def extend(self, state: SamplerState, rows: Sequence[int],
             token_lists: Sequence[Sequence[int]]) -> SamplerState:
    rows = self._check_rows(state, rows, "extend")
    if len(rows) != len(token_lists):
      raise ValueError(f"extend got {len(rows)} rows but {len(token_lists)} token lists")
    counts = np.zeros((state.batch_size,), np.int32)
    lens = np.asarray(state.lengths)
    width = 1
    for r, toks in zip(rows, token_lists):
      if not len(toks):
        raise ValueError(f"extend: token list for row {r} is empty")
      width = max(width, pick_bucket(self.config.extend_buckets, len(toks),
                                     f"observation for row {r}"))
      if lens[r] + len(toks) > state.cache_length:
        raise ValueError(f"extend: row {r} holds {lens[r]} tokens; {len(toks)} more exceed the "
                         f"cache length {state.cache_length}")
      counts[r] = len(toks)
    tokens = np.full((state.batch_size, width), self.config.pad_id, np.int32)
    for r, toks in zip(rows, token_lists):
      tokens[r, :len(toks)] = self._check_ids(toks, f"observation for row {r}")
    end = int((lens + counts)[counts > 0].max()) if counts.any() else 1
    state, window = self._fit(state, end)
    part = self.extend_rows_run(state.batch_size, len(rows))
    if part < state.batch_size:
      src = np.full((part,), rows[0], np.int32)
      dst = np.full((part,), state.batch_size, np.int32)       # padding rows: dropped
      src[:len(rows)] = dst[:len(rows)] = rows
      return self._extend_rows(self._run_params, state, jnp.asarray(src), jnp.asarray(dst),
                               jnp.asarray(tokens[src] * (dst < state.batch_size)[:, None]),
                               jnp.asarray(counts[src] * (dst < state.batch_size)),
                               window=window)
    return self._extend(self._run_params, state, self._rows(tokens), self._rows(counts),
                        window=window)

  def extend_rows_run(self, batch_size: int, rows: int) -> int:
    """Rows an `extend` of `rows` rows of a `batch_size`-row state runs on: the next power
    of two when that is at most half the batch (and the sampler unsharded), else the batch."""
    part = 1
    while part < rows:
      part *= 2
    return part if self.mesh is None and 0 < rows and 2 * part <= batch_size else batch_size

  def refill(self, state: SamplerState, rows: Sequence[int], prompts: Sequence[Sequence[int]],
             samples_per_prompt: int = 1, seed: int = 0, first_row: int = 0) -> SamplerState:
    """See the module docstring.  Row rows[p * G + g] becomes sample g of prompts[p].  The
    prompts' forward runs on a power-of-two count of rows (a few shapes; pads are dropped) and
    holds one cache per prompt, of the prompt bucket's width, beside the state."""
    rows = self._check_rows(state, rows, "refill")
    g = int(samples_per_prompt)
    if not prompts or len(rows) != len(prompts) * g:
      raise ValueError(f"refill got {len(rows)} rows for {len(prompts)} prompts x {g} samples")
    if len(set(rows)) != len(rows):
      raise ValueError(f"refill: rows repeat: {rows}")
    k = len(prompts)
    width = 1
    while width < k:
      width *= 2
    fresh = self._prefill_prompts(list(prompts) + [prompts[0]] * (width - k), 1, seed,
                                  first_row, 0)          # a cache of the prompts' bucket only
    dst = np.full((width * g,), state.batch_size, np.int32)
    dst[:k * g] = rows
    src = np.arange(width * g, dtype=np.int32) // g
    batch_rows = (np.uint32(first_row) + np.arange(width * g)).astype(np.uint32)
    temps = self.config.row_temperatures(width, g)
    state, _ = self._fit(state, kv_cache.width(fresh.cache))
    return self._place(state, fresh, self._rows(dst), self._rows(src), self._rows(batch_rows),
                       jnp.uint32(seed), self._rows(temps))

  def set_done(self, state: SamplerState, rows: Sequence[int]) -> SamplerState:
    return self._set_done(state, self._rows(self._mask(state, rows, "set_done")))

  def clone_rows(self, state: SamplerState, src_rows: Sequence[int],
                 dst_rows: Sequence[int]) -> SamplerState:
    src = self._check_rows(state, src_rows, "clone_rows src")
    dst = self._check_rows(state, dst_rows, "clone_rows dst")
    if len(src) != len(dst):
      raise ValueError(f"clone_rows got {len(src)} sources but {len(dst)} destinations")
    if len(set(dst)) != len(dst):
      raise ValueError(f"clone_rows: destination rows repeat: {dst}")
    source = np.arange(state.batch_size, dtype=np.int32)
    source[dst] = src
    return self._clone(state, self._rows(source))

  def truncate(self, state: SamplerState, rows: Sequence[int],
               new_lengths: Sequence[int]) -> SamplerState:
    rows = self._check_rows(state, rows, "truncate")
    if len(rows) != len(new_lengths):
      raise ValueError(f"truncate got {len(rows)} rows but {len(new_lengths)} lengths")
    lens = np.asarray(state.lengths)
    target = lens.astype(np.int32).copy()
    for r, n in zip(rows, new_lengths):
      if not 1 <= n <= lens[r]:
        raise ValueError(f"truncate: row {r} has {lens[r]} tokens; new length {n} must be in "
                         f"[1, {lens[r]}]")
      target[r] = n
    return self._truncate(self._run_params, state, self._rows(target),
                          self._rows(self._mask(state, rows, "truncate")))

  # ---- helpers ----
  def _rows(self, x: np.ndarray):
    if self.mesh is None:
      return jnp.asarray(x)
    return jax.device_put(x, rows_sharding(self.mesh, x.shape))

  def _replicate(self, x):
    if self.mesh is None:
      return x
    return jax.device_put(x, jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec()))

  def _check_ids(self, ids, what: str) -> np.ndarray:
    arr = np.asarray(ids, np.int64)
    bad = np.nonzero((arr < 0) | (arr >= self.cfg.vocab_size))[0]
    if bad.size:
      raise ValueError(f"{what}: token {int(arr[bad[0]])} at index {int(bad[0])} is outside the "
                       f"vocabulary [0, {self.cfg.vocab_size})")
    return arr.astype(np.int32)

  @staticmethod
  def _check_rows(state: SamplerState, rows, what: str) -> list[int]:
    rows = [int(r) for r in rows]
    for r in rows:
      if not 0 <= r < state.batch_size:
        raise ValueError(f"{what}: row {r} is outside the batch of {state.batch_size}")
    return rows

  def _mask(self, state, rows, what) -> np.ndarray:
    mask = np.zeros((state.batch_size,), bool)
    mask[self._check_rows(state, rows, what)] = True
    return mask
