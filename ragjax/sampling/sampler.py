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
  (`first_row`: the wave's first row in the batch).  `row_ids` replaces first_row + b by any
  per-row index (evaluation: one derived from the question, so a question samples the same
  text in any batch).
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
  of the state, extended and written back (`ragjax.sampling.state_edits.take` / `put`), so an
  extend costs what its rows need, not the whole batch (unsharded samplers only).
* `set_done(state, rows)`: the rows stop decoding until extended or truncated.
* `refill(state, rows, prompts, samples_per_prompt, seed, first_row, row_ids)`: rows that
  finished take the G samples of new prompts (continuous batching): one forward per prompt,
  then each row gets the prompt's cache and the key and temperature it would have in one big
  prefill (row first_row + i of the batch, or row_ids[i]), so refilled rows sample what one
  big wave would.
* `clone_rows(state, src_rows, dst_rows)`: dst rows become copies of src rows (cache,
  history, length), with fresh keys.
* `reseed(state, rows, salts)`: rows' keys folded with their salts, so a turn decoded again
  from the same history samples anew (R3-RAG's format retry).
* `truncate(state, rows, new_lengths)`: drops the end of rows' histories (REX-RAG's cut
  before the answer); recomputes their next-token logits with a one-token forward.
* `set_params(params)`: weight sync from the trainer (same shapes, no recompile); with
  `fused_projections` (on for accelerators) the calls run on a fused copy of each layer's
  q/k/v and gate/up projections (`ragjax.models.fused`) built here, while `params` stay
  in transformers' layout.
* Runtime sampling values (a chat server's per-request settings): `prefill(...,
  temperature=T)` and `decode(..., top_p=P)` take new values without recompiling (top_p < 1
  and top_p = 1 are two programs); a sampler built with `stop_rows=N` swaps in up to N stop
  strings with `set_stop_strings` (its table padded to N rows; a new byte width compiles once).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from ragjax.models import kv_cache
from ragjax.models.decoder import unstack_layers
from ragjax.models.model_config import DecoderConfig
from ragjax.models.fused import shared_fused_copy
from ragjax.models.sharded import decoder_shardings
from ragjax.parallel.shard import batch_axis_size, shard_params
from ragjax.sampling import decode as decode_lib
from ragjax.sampling import prefill as prefill_lib
from ragjax.sampling import layout
from ragjax.sampling import state_edits as rows_lib
from ragjax.parallel.buckets import pick_bucket
from ragjax.sampling.sampler_config import SamplerConfig
from ragjax.sampling.layout import constrain_cache, rows_sharding
from ragjax.sampling.state import SamplerState, TurnOutput
from ragjax.sampling.stops import StopTable, compile_stop_strings, token_bytes


class Sampler:
  """Jitted prefill / decode / extend over one model; see the module docstring."""

  def __init__(self, cfg: DecoderConfig, params, tokenizer=None,
               config: SamplerConfig = SamplerConfig(), mesh: Optional[Mesh] = None,
               stop_rows: int = 0):
    self.cfg, self.config, self.mesh = cfg, config, mesh
    # The model the calls run: the caller's, or with `unroll_layers` a scanned model's layers
    # unrolled over a per-layer cache (the same weights, unstacked in `set_params`).
    self.unrolled = bool(config.unroll_layers and cfg.scan_layers)
    self.run_cfg = (dataclasses.replace(cfg, scan_layers=False, remat=False) if self.unrolled
                    else cfg)
    self.eos_ids = tuple(config.eos_ids if config.eos_ids is not None else cfg.eos_ids)
    self.cache_dtype = config.resolved_cache_dtype(cfg.dtype)
    self.stop_table = None
    self.stops = None
    self.tokenizer, self.stop_rows = tokenizer, int(stop_rows)
    if config.stop_strings or self.stop_rows:
      self._install_stops(config.stop_strings)
    self.fused = layout.fused_projections(mesh, cfg.num_kv_heads, config.fused_projections)
    self._param_shardings = self._run_shardings = None
    if mesh is not None:
      self._param_shardings = decoder_shardings(cfg, mesh)
      if self.fused or self.unrolled:
        self._run_shardings = decoder_shardings(self.run_cfg, mesh, fused=self.fused)
    self.set_params(params)
    # A per-layer cache is kept as wide as the window its rows need and grown through the
    # windows, so every call attends it whole: a window sliced out of a wider array is copied
    # before the dot each step (bench.decode_attention).  A stacked cache (scan_layers) is
    # allocated whole and each call slices its window.
    self.grow_cache = not self.run_cfg.scan_layers
    self.cpu_kernel = layout.cpu_kernel(mesh, config.cpu_attention_kernel)
    self.trace_counts: collections.Counter = collections.Counter()
    self._prefill = jax.jit(self._counted("prefill", self._prefill_fn),
                            static_argnames=("samples", "cache_length", "cache_width"))
    self._decode = jax.jit(self._counted("decode", self._decode_fn), donate_argnums=(2,),
                           static_argnames=("window", "steps", "nucleus"))
    self._extend = jax.jit(self._counted("extend", self._extend_fn), donate_argnums=(1,),
                           static_argnames=("window",))
    self._extend_rows = jax.jit(self._counted("extend_rows", self._extend_rows_fn),
                                donate_argnums=(1,), static_argnames=("window",))
    self._truncate = jax.jit(self._counted("truncate", self._truncate_fn), donate_argnums=(1,))
    self._clone = jax.jit(self._counted("clone", self._clone_fn), donate_argnums=(0,))
    self._set_done = jax.jit(self._counted("set_done", rows_lib.set_done), donate_argnums=(0,))
    self._reseed = jax.jit(self._counted("reseed", rows_lib.reseed), donate_argnums=(0,))
    self._place = jax.jit(self._counted("place", self._place_fn), donate_argnums=(0,))
    self._grow = jax.jit(self._counted("grow", self._grow_fn), static_argnames=("slots",))

  # ---- jitted bodies (pure) ----
  def _counted(self, name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kw):
      self.trace_counts[name] += 1          # runs at trace time only
      return fn(*args, **kw)
    return wrapper

  def _prefill_fn(self, params, tokens, lengths, seed, temperature, row_ids, prefix, *, samples,
                  cache_length, cache_width):
    return prefill_lib.prefill(
        self.run_cfg, params, tokens, lengths, seed, temperature, row_ids=row_ids, prefix=prefix,
        samples=samples, cache_length=cache_length, cache_dtype=self.cache_dtype,
        num_stops=0 if self.stops is None else self.stops.num_stops, mesh=self.mesh,
        cache_width=cache_width, cpu_kernel=self.cpu_kernel, fused=self.fused)

  def _grow_fn(self, cache, *, slots):
    return constrain_cache(kv_cache.grow(cache, slots), self.mesh)

  def _decode_fn(self, params, stop_table, state, top_p, *, window, steps, nucleus):
    return decode_lib.decode_turn(self.run_cfg, self.config, self.eos_ids, params, stop_table,
                                  state, mesh=self.mesh, window=window, steps=steps,
                                  cpu_kernel=self.cpu_kernel, top_p=top_p, nucleus=nucleus,
                                  fused=self.fused,
                                  pallas_decode=self.config.decode_attention == "pallas")

  def _extend_fn(self, params, state, tokens, counts, *, window):
    return prefill_lib.extend(self.run_cfg, params, state, tokens, counts, mesh=self.mesh,
                              window=window, cpu_kernel=self.cpu_kernel, fused=self.fused)

  def _extend_rows_fn(self, params, state, src, dst, tokens, counts, *, window):
    part = prefill_lib.extend(self.run_cfg, params, rows_lib.take(state, src), tokens, counts,
                              window=window, cpu_kernel=self.cpu_kernel, fused=self.fused)
    return rows_lib.put(state, dst, part)

  def _truncate_fn(self, params, state, new_lengths, chosen):
    return rows_lib.truncate(self.run_cfg, params, state, new_lengths, chosen, mesh=self.mesh,
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

  def set_stop_strings(self, strings: Sequence[str], table: Optional[np.ndarray] = None) -> None:
    """The stop strings of the decodes that follow, swapped without recompiling: the table
    (`stops.compile_stop_strings(strings, ..., rows=stop_rows)`, built here when None) keeps the
    sampler's `stop_rows` rows (a new byte width compiles once).  Needs `stop_rows`."""
    strings = tuple(strings)
    if not self.stop_rows or len(strings) > self.stop_rows:
      raise ValueError(f"{len(strings)} stop strings need a sampler built with stop_rows >= "
                       f"{len(strings)} (it has {self.stop_rows})")
    if strings == self.config.stop_strings and (table is None or self.stops is None
                                                or table.shape == self.stops.table.shape):
      return                                  # already installed (no copy to the device)
    self._install_stops(strings, table)
    self.config = self.config.replace(stop_strings=strings)

  def _install_stops(self, strings: tuple, table: Optional[np.ndarray] = None) -> None:
    if table is None and not strings:      # no strings yet: rows that never match
      table = np.zeros((self.stop_rows, 1, self.cfg.vocab_size), np.int16)
    elif table is None:
      if self.tokenizer is None:
        raise ValueError(f"stop_strings {strings!r} need a tokenizer to compile")
      table = compile_stop_strings(strings, token_bytes(self.tokenizer, self.cfg.vocab_size),
                                   rows=self.stop_rows or None).table
    if self.stop_rows and table.shape[0] != self.stop_rows:
      raise ValueError(f"a stop table of {table.shape[0]} rows for a sampler of stop_rows="
                       f"{self.stop_rows}")
    self.stops = StopTable(strings, table)
    self.stop_table = self._replicate(jnp.asarray(table))

  @property
  def run_params(self):
    """The weights the compiled calls run on: `params`, their unrolled copy
    (`unroll_layers`) or their fused copy."""
    return self._run_params

  def set_params(self, params) -> None:
    """Installs (and, under a mesh, shards) the weights the sampler decodes with.  `params`
    (transformers' layout) stay readable as `self.params`; with fused projections the calls
    run on a fused copy of the attention and MLP input projections (ragjax.models.fused),
    one per weights, shared with other samplers over the same ones."""
    if self._param_shardings is not None:
      params = shard_params(params, self._param_shardings)
    self.params = params
    run = unstack_layers(params, self.cfg.num_layers) if self.unrolled else params
    place = None
    if self._run_shardings is not None:
      place = functools.partial(shard_params, shardings=self._run_shardings)
    if self.fused:
      run = shared_fused_copy(self.run_cfg, run, place, self.mesh)
    elif self.unrolled and place is not None:
      run = place(run)
    self._run_params = run

  def prefill(self, prompts: Sequence[Sequence[int]], samples_per_prompt: int = 1,
              seed: int = 0, first_row: int = 0,
              row_ids: Optional[Sequence[int]] = None,
              temperature: Optional[float] = None) -> SamplerState:
    """`temperature`: every row draws at it (a runtime value, no recompile) instead of the
    config's temperature or ladder."""
    return self._prefill_prompts(prompts, samples_per_prompt, seed,
                                 _row_ids(first_row, row_ids, len(prompts) * samples_per_prompt),
                                 self.config.max_cache_length, temperature)

  def _prefill_prompts(self, prompts, samples_per_prompt, seed, row_ids, cache_length,
                       temperature=None):
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
    head, tail = self.shared_head(tokens, lens, width)
    prefix = None
    if head:
      prefix = jnp.asarray(tokens[:1, :head])
      tokens = np.ascontiguousarray(tokens[:, head:head + tail])
    temps = self.config.row_temperatures(len(prompts), samples_per_prompt)
    if temperature is not None:
      if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
      temps = np.full_like(temps, temperature)
    cache_length = cache_length or width
    cache_width = cache_length
    if self.grow_cache:         # room for the prompts and a first turn; grown as rows need
      cache_width = min(cache_length, max(width, self.config.attend_window(
          width + self.config.max_new_tokens)))
    return self._prefill(self._run_params, self._rows(tokens),
                         self._rows(np.asarray(lens, np.int32)), jnp.uint32(seed),
                         self._rows(temps), self._rows(row_ids), prefix,
                         samples=samples_per_prompt, cache_length=cache_length,
                         cache_width=cache_width)

  def shared_head(self, tokens: np.ndarray, lens: Sequence[int], width: int) -> tuple[int, int]:
    """(head, tail): the prompts' shared head run once (`SamplerConfig.shared_prefix`: a
    multiple of it, shorter than every prompt) and the width their own tails pad to (a
    multiple of it, head + tail <= width); (0, width) when not shared."""
    unit = self.config.shared_prefix
    if not unit or len(lens) < 2 or self.mesh is not None:
      return 0, width
    same = np.all(tokens == tokens[:1], axis=0)
    common = int(np.argmin(same)) if not same.all() else width
    head = min(common, min(lens) - 1) // unit * unit
    if head < unit:
      return 0, width
    tail = min(-(-(max(lens) - head) // unit) * unit, width - head)
    return head, tail

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

  def decode(self, state: SamplerState, steps: Optional[int] = None,
             top_p: Optional[float] = None, stop_table=None) -> tuple[SamplerState, TurnOutput]:
    """The live rows' next turn, or its next `steps` tokens (rows still mid-turn then come
    back PAUSED and the next call resumes them).  `top_p` replaces the config's (a runtime
    value: one program for every top_p below 1).  `stop_table`: a `self.stop_table` read
    earlier (what `set_stop_strings` installed then), for a caller that decodes from several
    threads while another installs other strings; default the one installed now."""
    state, window, steps, top_p = self._decode_args(state, steps, top_p)
    table = self.stop_table if stop_table is None else stop_table
    return self._decode(self._run_params, table, state, np.float32(top_p),
                        window=window, steps=steps,
                        nucleus=top_p < 1.0 and not self.config.greedy)

  def lower_decode(self, state: SamplerState, steps: Optional[int] = None) -> jax.stages.Lowered:
    """The program `decode(state, steps)` runs, lowered and not run (the state is not
    donated): `.compile().as_text()` is the optimised HLO, where the tests check that the KV
    cache is updated in place and count the fusions of a decode step."""
    state, window, steps, top_p = self._decode_args(state, steps, None)
    return self._decode.lower(self._run_params, self.stop_table, state, np.float32(top_p),
                              window=window, steps=steps,
                              nucleus=top_p < 1.0 and not self.config.greedy)

  def _decode_args(self, state, steps, top_p):
    """(state fitted to the call's window, window, steps or None for the whole budget,
    top_p)."""
    budget = self.config.max_new_tokens
    if steps is not None and steps < 1:
      raise ValueError(f"decode steps must be >= 1, got {steps}")
    top_p = self.config.top_p if top_p is None else float(top_p)
    if not 0.0 < top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    steps = budget if steps is None else min(int(steps), budget)
    lens, done = np.asarray(state.lengths), np.asarray(state.finished)
    end = int(lens[~done].max()) + steps if (~done).any() else 1
    state, window = self._fit(state, end)
    return state, window, None if steps == budget else steps, top_p

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
             samples_per_prompt: int = 1, seed: int = 0, first_row: int = 0,
             row_ids: Optional[Sequence[int]] = None) -> SamplerState:
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
                                  _row_ids(first_row, None, width), 0)   # the bucket's cache
    dst = np.full((width * g,), state.batch_size, np.int32)
    dst[:k * g] = rows
    src = np.arange(width * g, dtype=np.int32) // g
    batch_rows = _row_ids(first_row, None, width * g)
    if row_ids is not None:
      batch_rows[:k * g] = _row_ids(0, row_ids, k * g)
    temps = self.config.row_temperatures(width, g)
    state, _ = self._fit(state, kv_cache.width(fresh.cache))
    return self._place(state, fresh, self._rows(dst), self._rows(src), self._rows(batch_rows),
                       jnp.uint32(seed), self._rows(temps))

  def set_done(self, state: SamplerState, rows: Sequence[int]) -> SamplerState:
    return self._set_done(state, self._rows(self._mask(state, rows, "set_done")))

  def reseed(self, state: SamplerState, rows: Sequence[int], salts: Sequence[int]
             ) -> SamplerState:
    """Rows' keys folded with their salts (a deterministic new stream per (row, salt))."""
    if len(rows) != len(salts):
      raise ValueError(f"reseed got {len(rows)} rows but {len(salts)} salts")
    full = np.zeros((state.batch_size,), np.int32)
    full[self._check_rows(state, rows, "reseed")] = np.asarray(salts, np.int32)
    return self._reseed(state, self._rows(self._mask(state, rows, "reseed")), self._rows(full))

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


def _row_ids(first_row: int, row_ids, n: int) -> np.ndarray:
  """Each row's key index: `row_ids` (any ints, taken mod 2**32) or first_row + b."""
  if row_ids is None:
    return (np.uint64(first_row) + np.arange(n, dtype=np.uint64)).astype(np.uint32)
  ids = np.asarray([int(i) % (1 << 32) for i in row_ids], np.uint64).astype(np.uint32)
  if ids.shape != (n,):
    raise ValueError(f"row_ids: {ids.size} ids for {n} rows")
  return ids
