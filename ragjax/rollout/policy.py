"""`Policy`: what the rollout engine needs from whatever writes the tokens.

The JAX `ragjax.sampling.Sampler` implements it (the RL policy and in-process judges), as does
`ragjax.rollout.teacher.TeacherPolicy` (forced text for cold-start traces); test doubles in
tests/ implement it too.  Rows are prompt-major (row p * G + g is sample g of prompt p), every
call takes a state and returns the next one, and the state exposes `cache_length` (the most
tokens a row may hold).  `decode` returns a `ragjax.sampling.state.TurnOutput` whose
`stop_reason` uses the codes of `ragjax.sampling.sampler_config`.

Optional: `refill(state, rows, prompts, samples_per_prompt, seed, first_row)` puts new prompts'
samples into rows that finished (continuous batching; `ragjax.sampling.Sampler.refill`).  The
engine uses it for rollouts in waves when the policy has it, and runs fixed waves otherwise.
Optional: `reseed(state, rows, salts)` gives rows a new deterministic sampling stream (a turn
regenerated from the same history then differs: R3-RAG's format retry); without it a retried
turn is decoded again as the policy decodes any turn.
Optional: `chunked_decode = True` with `decode(state, steps=k)`: at most k tokens per row, rows
still mid-turn come back with stop_reason PAUSED and the next call continues their turn (the
engine's `decode_chunk`, which overlaps retrieval with decoding; whole turns otherwise).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, runtime_checkable


@runtime_checkable
class Policy(Protocol):
  eos_ids: tuple[int, ...]          # a sampled eos ends the row
  stop_strings: tuple[str, ...]     # a turn ends right after one of these (matched on device)
  max_extend: Optional[int]         # most tokens one `extend` call takes (None: no limit)

  def prefill(self, prompts: Sequence[Sequence[int]], samples_per_prompt: int = 1,
              seed: int = 0, first_row: int = 0) -> Any: ...
  # `first_row`: the index of the state's first row in the whole batch (rollout waves), so a
  # row's sampling key depends on its place in the batch, not in its wave.  A policy may also
  # take `row_ids` (one key index per row, replacing first_row + b) in `prefill` and `refill`:
  # the engine passes them only when its caller gives `key_ids` (evaluation).

  def decode(self, state) -> tuple[Any, Any]: ...

  def extend(self, state, rows: Sequence[int], token_lists: Sequence[Sequence[int]]) -> Any: ...

  def set_done(self, state, rows: Sequence[int]) -> Any: ...

  def clone_rows(self, state, src_rows: Sequence[int], dst_rows: Sequence[int]) -> Any: ...

  def truncate(self, state, rows: Sequence[int], new_lengths: Sequence[int]) -> Any: ...

  def set_params(self, params) -> None: ...
