"""The engine pieces two papers need, on the real JAX sampler (one tiny random model, one
compiled sampler shared by the tests):

* UR²'s per-task turn budgets (the code's vLLM max_tokens: QA 512, multiple choice 1,536,
  math 3,072, in one batch; seeds §A2.3): the engine ends a question's turn at its task's
  budget, exactly as a sampler with that budget would (same tokens: a row's draws depend only
  on its seed, row and position), in whole turns and in decode chunks;
* R3-RAG's format retry regenerates a step from the same history, which repeats itself unless
  the row gets a new stream (`Sampler.reseed`)."""

import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.models.presets import PRESETS  # noqa: E402
from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rollout.protocols import PromptInput, get_protocol  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402

CAPS = {"qa": 5, "math": 9}
RECORDS = [{"question": "Who founded the observatory", "task": "qa"},
           {"question": "What is 12 + 30", "task": "math"},
           {"question": "Where is Quillport", "task": "qa"}]


@pytest.fixture(scope="module")
def sampler():
  tok, cfg = h.tokenizer(), PRESETS["tiny"]
  params = jax.jit(lambda key: init_params(cfg, key))(jax.random.PRNGKey(3))
  conf = SamplerConfig(max_cache_length=256, max_new_tokens=16, prompt_buckets=(128,),
                       extend_buckets=(32,), stop_strings=get_protocol("ur2").stop_sequences,
                       eos_ids=(tok.eos_token_id,), temperature=1.5)
  return Sampler(cfg, params, tok, conf)


def turn_ids(batch, row):
  """The policy tokens of the row's first turn."""
  turn = batch.rows[row].turns[0]
  return np.asarray(batch.traj.tokens)[row, turn.start:turn.end].tolist()


def test_a_task_budget_ends_the_turn_as_a_sampler_with_that_budget(sampler):
  tok = h.tokenizer()
  plain = get_protocol("ur2", prompts="compact", max_turns=1)
  capped = get_protocol("ur2", prompts="compact", max_turns=1, turn_tokens=CAPS)
  assert capped.turn_budget(PromptInput("q", task="math")) == 9
  assert capped.turn_budget(PromptInput("q", task="mcq")) is None     # the sampler's budget
  ret = h.bm25_retriever()
  whole = RolloutEngine(plain, sampler, ret, tok).run(RECORDS, samples_per_prompt=2, seed=5)
  runs = [RolloutEngine(capped, sampler, ret, tok, EngineConfig(decode_chunk=chunk)).run(
      RECORDS, samples_per_prompt=2, seed=5) for chunk in (0, 3)]
  cut = 0
  for row, meta in enumerate(whole.rows):
    cap = CAPS[RECORDS[meta.prompt_index]["task"]]
    full = turn_ids(whole, row)
    for run in runs:
      assert turn_ids(run, row) == full[:cap], (row, run)       # a prefix: same draws
      assert run.rows[row].turns[0].text == tok.decode(full[:cap])
    cut += len(full) > cap
  assert cut >= 4                # the random policy writes past both budgets on most rows
  np.testing.assert_array_equal(np.asarray(runs[0].traj.tokens), np.asarray(runs[1].traj.tokens))
  with pytest.raises(ValueError, match="turn_tokens\\['qa'\\] must be a positive int"):
    get_protocol("ur2", turn_tokens={"qa": 0})
  with pytest.raises(ValueError, match="turn_tokens key must be"):
    get_protocol("ur2", turn_tokens={"code": 5})


def test_the_sampler_regenerates_anew_after_a_reseed(sampler):
  """The sampler's draws depend on (seed, row, position), so a turn decoded again from the same
  history repeats itself; `reseed` gives a row a new stream (the other rows unchanged)."""
  tok = h.tokenizer()
  prompts = [tok(r["question"], add_special_tokens=False)["input_ids"] for r in RECORDS]
  lens = [len(p) for p in prompts for _ in range(2)]

  def turn(state):
    state, out = sampler.decode(state)
    n = np.asarray(out.lengths)
    return state, [np.asarray(out.tokens)[r, :n[r]].tolist() for r in range(len(lens))]

  state, first = turn(sampler.prefill(prompts, samples_per_prompt=2, seed=0))
  state, again = turn(sampler.truncate(state, list(range(6)), lens))
  assert again == first
  state = sampler.reseed(sampler.truncate(state, list(range(6)), lens), [0], [1001])
  _, anew = turn(state)
  assert anew[0] != first[0] and anew[1:] == first[1:]
