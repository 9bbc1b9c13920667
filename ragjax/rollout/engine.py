"""The multi-turn rollout engine: B prompts x G samples become a labelled Trajectory batch.

`RolloutEngine.run` plans the run's waves (`sizing`), prefills each (`waves.start_wave`; refill
feeds queued prompts into freed rows: `Wave.refill`) and runs its turns with the one turn loop
(`turn_loop.TurnLoop`: decode, read, hooks, one batched retrieval per turn, observe, one extend
per turn, no re-prefill; whole turns or `decode_chunk` steps per call).  What a turn does to a
row is `turns.Turns`; the rows and every sampler call on them are `rows.RowStore`, whose edits
hooks make through `hooks.RowEditor`; the retrieval request, call, hits and timing are
`retrieval_step.RetrievalStep`; how a row's context goes on -- one stream, or R3-RAG's restart
from a new prompt each turn -- is `contexts`.  The engine keeps no state between runs; each
wave's is a `Wave`.

`sampler` implements `ragjax.rollout.policy.Policy` (the JAX Sampler, the teacher, test doubles);
`retriever` is anything with `search(queries, k) -> hits` (or `search_with_context`, see
`retrieval_step`).  Prompts are dataset records (dicts with a `question`, as the data package
writes them), `PromptInput`s or strings; hooks see the record of their row's prompt, so a
method hook can read its gold answers.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import warnings
from typing import Optional, Sequence

from ragjax.rollout.contexts import context_for
from ragjax.rollout.hooks import Hook
from ragjax.rollout.protocols.base import Protocol, as_prompt_input
from ragjax.rollout.renderer import Renderer
from ragjax.rollout.retrieval_step import RetrievalStep
from ragjax.rollout.row_store import RowStore
from ragjax.rollout.sizing import plan_waves, spare_prompts, spare_rows_for, wave_spare_rows
from ragjax.rollout.trajectory import (RolloutBatch, RowMeta, TrajectoryMeta, assemble,
                                       assemble_samples)
from ragjax.rollout.turn_loop import TurnLoop
from ragjax.rollout.turns import Turns
from ragjax.rollout.waves import Wave, fit_prompt, start_wave

__all__ = ["EngineConfig", "Hook", "RolloutEngine", "spare_prompts", "spare_rows_for"]


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """Loop limits and assembly options.

  `max_response_tokens` caps everything after the prompt (policy + observations); the tighter
  of it and the protocol's own cap applies.  `spare_rows` reserves sampler rows for hooks that
  clone rows (REX-RAG); they are prefilled with copies of the first prompt and kept idle.
  spare_rows=-1 sizes them per run from the hooks: the sum of `hook.spare_rows(rows)` over
  hooks that define it (a hook that clones with probability p asks for about rows x p).  They
  come in whole groups, as many as keep the sampler's rows a multiple of its
  `row_multiple` (its mesh's batch devices), see `spare_prompts`.
  `widths`: the batch is right-padded to the smallest of these holding its longest row (a few
  shapes, so the jitted train step compiles a few times); None pads to a multiple of 8.
  `wave_rows`: at most this many sampler rows at once (0: the whole batch; see `run`); the
  spare rows are shared among the waves in proportion to their prompts.
  `refill`: with `wave_rows`, rows that finish free their sampler rows for the next prompts'
  groups (continuous batching; needs a sampler with `refill` and no hooks, else fixed waves).
  `decode_chunk`: > 0 overlaps retrieval with decoding: the sampler decodes at most this many
  steps per call, and a row whose turn ended is read at once and its search sent to a
  background thread while the other rows keep decoding; when every row's turn has ended the
  documents are extended, one extend per turn as with whole turns.  (Letting each row start
  its next turn as soon as its documents arrive was measured slower: a decode call costs the
  whole batch however few rows it advances; docs/benchmarks/rollout.md.)  Needs a sampler with
  `chunked_decode`, no hooks (they see a turn's rows together) and a protocol that keeps its
  context (not "restart"); else whole turns.  0: one `decode` call per turn, retrieval after.
  """
  max_response_tokens: Optional[int] = None
  spare_rows: int = 0
  widths: Optional[tuple[int, ...]] = None
  wave_rows: int = 0
  refill: bool = True
  decode_chunk: int = 0
  pad_id: int = 0
  chat: Optional[bool] = None           # None: chat template iff the tokenizer has one



class RolloutEngine:
  def __init__(self, protocol: Protocol, sampler, retriever, tokenizer,
               config: EngineConfig = EngineConfig(), hooks: Sequence[Hook] = ()):
    self.protocol, self.sampler, self.retriever = protocol, sampler, retriever
    self.tokenizer = tokenizer
    self.config = config
    self.hooks = list(hooks)
    self.renderer = Renderer(protocol, tokenizer, chat=config.chat)
    self.context = context_for(protocol, self.renderer)
    self.restart = self.context.restarts
    self.turns = Turns(protocol, self.renderer, self.context, sampler.eos_ids)
    self.retrieval_calls = 0
    caps = [c for c in (config.max_response_tokens, protocol.max_response_tokens) if c]
    self.response_budget = min(caps) if caps else None
    self.max_extend = sampler.max_extend
    stops = sampler.stop_strings
    missing = [s for s in protocol.stop_sequences if s not in stops]
    if missing:
      warnings.warn(f"the sampler does not stop on {missing} ({protocol.name}); turns run to the "
                    f"per-turn budget and are cut after the action, which wastes decode steps",
                    stacklevel=2)

  @property
  def eos_ids(self) -> tuple[int, ...]:
    """The policy's end-of-sequence ids."""
    return tuple(self.sampler.eos_ids)

  def set_params(self, params) -> None:
    """The params the policy samples with from now on (the trainer's, before each rollout)."""
    self.sampler.set_params(params)

  def run(self, prompts: Sequence, samples_per_prompt: int = 1, seed: int = 0,
          uids: Optional[Sequence[int]] = None,
          key_ids: Optional[Sequence[int]] = None) -> RolloutBatch:
    """Rolls out every (unique) prompt `samples_per_prompt` times; `uids` are the group ids
    (default 0..B-1), so GRPO groups are per prompt, never per sample (Search-R1 issue #88).
    Hooks may add rows (REX-RAG clones), so the batch can hold more rows than prompts x G.

    With `EngineConfig.wave_rows`, the prompts run in waves of at most that many sampler rows
    (whole groups, so a group never splits), one after the other: the KV cache and prefill
    hold one wave, not the batch.  With `EngineConfig.refill` (the default) the waves are not
    fixed: when G sampler rows are free, the next prompt's group is prefilled into them while
    the other rows go on, so short rows do not wait for the wave's longest.  Row b of the whole
    batch samples with key fold_in(PRNGKey(seed), b) whatever its wave or sampler row, so waves
    change memory and speed, not trajectories.  `key_ids` (one int per prompt, with a sampler
    whose `prefill` / `refill` take `row_ids`) replaces the batch position: sample g of prompt
    p draws with fold_in(PRNGKey(seed), key_ids[p] + g), so a prompt samples the same text in
    any batch (evaluation keys each question by its id and text)."""
    t_start = time.perf_counter()
    dicts, metas, timings, samples = self.run_rows(prompts, samples_per_prompt, seed, uids,
                                                   key_ids=key_ids)
    stats = timings.pop("stats")
    traj = assemble(dicts, self.config.widths, self.config.pad_id)
    timings["rollout_s"] = time.perf_counter() - t_start
    return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=metas, protocol=self.protocol.name),
                        timings=timings, stats=stats,
                        samples=assemble_samples(samples, self.config.widths, self.config.pad_id))

  def run_rows(self, prompts: Sequence, samples_per_prompt: int = 1, seed: int = 0,
               uids: Optional[Sequence[int]] = None, first_row: int = 0,
               key_ids: Optional[Sequence[int]] = None
               ) -> tuple[list[dict], list[RowMeta], dict, list]:
    """`run` before assembly: (host row dicts, row records, timings with the hooks' counters
    under "stats", a restart protocol's step samples as (batch row, sample dict) pairs).
    `first_row` is the index of these prompts' first row in a larger batch (rows of one batch
    split over processes keep the keys they would have had together)."""
    stats = collections.Counter()
    retrieval = RetrievalStep(self.protocol, self.retriever, self.tokenizer)
    prompts = list(prompts)
    inputs = [as_prompt_input(p) for p in prompts]
    if not inputs:
      raise ValueError("run() needs at least one prompt")
    g = int(samples_per_prompt)
    if g < 1:
      raise ValueError(f"samples_per_prompt must be >= 1, got {samples_per_prompt}")
    uids = list(range(len(inputs))) if uids is None else [int(u) for u in uids]
    if len(uids) != len(inputs):
      raise ValueError(f"{len(uids)} uids for {len(inputs)} prompts")
    if key_ids is not None and len(key_ids) != len(inputs):
      raise ValueError(f"{len(key_ids)} key_ids for {len(inputs)} prompts")
    dicts, metas, samples = [], [], []
    try:
      for plan in plan_waves(len(inputs), g, self.config.wave_rows, self.refills()):
        part = slice(plan.start, plan.stop)
        spare = wave_spare_rows(self.config.spare_rows, self.hooks, plan.held, g, len(inputs))
        wave = self._start_wave(prompts[part], inputs[part], uids[part], g, seed,
                                first_row + plan.start * g, spare, plan.held,
                                None if key_ids is None else list(key_ids)[part], stats)
        TurnLoop(wave, self.turns, retrieval, self.hooks,
                 self.config.decode_chunk if self.streams() else 0).run()
        d, m, s = self._records(wave, prompt_offset=plan.start, row_offset=len(dicts))
        dicts += d
        metas += m
        samples += s
    finally:
      self.retrieval_calls += retrieval.calls
    return dicts, metas, {**retrieval.timings(), "stats": dict(stats)}, samples

  def refills(self) -> bool:
    """Whether waves refill freed rows (`EngineConfig.refill`, a sampler with `refill`, no
    hooks: REX-RAG's clones take the wave's spare rows, so its waves stay fixed)."""
    return bool(self.config.refill and hasattr(self.sampler, "refill") and not self.hooks)

  def streams(self) -> bool:
    """Whether turns stream (`EngineConfig.decode_chunk`, a sampler with `chunked_decode`, no
    hooks, a protocol that keeps its context and retries no turn)."""
    return bool(self.config.decode_chunk > 0 and getattr(self.sampler, "chunked_decode", False)
                and not self.hooks and not self.restart and not self.turns.format_retries)

  def spare_rows(self, rows: int) -> int:
    """Spare sampler rows for a run of `rows` rows (see EngineConfig.spare_rows)."""
    return spare_rows_for(self.config.spare_rows, self.hooks, rows)

  def _start_wave(self, records, inputs, uids, g, seed, first_row, spare, held, key_ids,
                  stats) -> Wave:
    limit = getattr(self.sampler, "max_prompt_len", None)
    prompt_ids = [fit_prompt(self.context.prompt_ids(x), x, limit, stats) for x in inputs]
    return start_wave(self.sampler, records, inputs, uids, prompt_ids, g, seed, first_row,
                      spare, held, key_ids,
                      lambda state, free: RowStore(self.sampler, state, free, self.renderer,
                                                   self.response_budget, self.max_extend, stats))

  def _records(self, wave: Wave, prompt_offset: int = 0, row_offset: int = 0
               ) -> tuple[list, list, list]:
    """The wave's rows as host dicts and records (originals first, then clones) and its step
    samples as (row, dict) pairs, indexed in the whole batch (`prompt_offset`: the wave's
    first prompt; `row_offset`: rows before it)."""
    rows = wave.rows
    order = rows.batch_order()
    index = {r: row_offset + i for i, r in enumerate(order)}
    dicts, metas, samples = [], [], []
    for r in order:
      row = rows[r]
      dicts.append(dict(tokens=row.tokens, labels=row.labels, logprobs=row.logprobs,
                        turns=row.turns, prompt_len=row.prompt_len, group_id=row.group_id))
      samples += [(index[r], d) for d in self.context.samples(row)]
      meta = RowMeta(
          row=index[r], group_id=row.group_id, prompt_index=prompt_offset + row.prompt_index,
          sample_index=row.sample_index, sampler_row=row.sampler_row,
          cloned_at_turn=row.cloned_at_turn,
          clone_of=None if row.clone_of is None else index[row.clone_of],
          answer=row.answer, stop_reason=row.stop_reason,
          response_text=self.context.response(row), turns=row.records)
      meta.extra = self.protocol.annotate(meta)
      metas.append(meta)
    return dicts, metas, samples
