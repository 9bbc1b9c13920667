"""The engine on the real `ragjax.sampling.Sampler` (tiny decoder, on-device stop strings).

Two models: a random one (sampling at temperature 1: whatever it writes is an invalid action)
and one whose weights make greedy decoding write `<search> Tessaly River </search>` after every
newline (attention and MLP outputs zeroed, so the next token is a function of the current one).
Both check that the trajectory is exactly the sampler's history and that the sampler's log-probs
equal a teacher-forced forward over the trajectory, the number the trainer will recompute.
"""

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.models.decoder import Decoder, init_params  # noqa: E402
from ragjax.models.presets import PRESETS  # noqa: E402
from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols.base import as_prompt_input  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.rex_rag import EXPLORATION_PROMPTS, RexRagCloneHook  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402

SEARCH = "<search> Tessaly River </search>"


def sampler_for(cfg, params, tok, proto, **kw):
  conf = SamplerConfig(max_cache_length=768, max_new_tokens=16, prompt_buckets=(256,),
                       extend_buckets=(32, 128, 512), stop_strings=proto.stop_sequences,
                       eos_ids=(tok.eos_token_id,), **kw)
  return Sampler(cfg, params, tok, conf)


def check_against_sampler(batch, sampler, state, cfg, params):
  for i, meta in enumerate(batch.meta.rows):
    k = int(batch.traj.lengths[i])
    assert state.history(meta.sampler_row)[:k] == batch.traj.tokens[i, :k].tolist()
  check_teacher_forced(batch, cfg, params)


def check_teacher_forced(batch, cfg, params):
  """The sampler's log-probs (temperature 1 / greedy) equal a forward over the trajectory."""
  t = batch.traj
  tokens = jnp.asarray(t.tokens)          # right padding: causal, so it never affects a row
  logits, _ = jax.jit(lambda p, x: Decoder(cfg).apply({"params": p}, x))(params, tokens)
  lp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1))
  for i in range(len(batch.meta.rows)):
    k = int(t.lengths[i])
    ids = t.tokens[i, :k].tolist()
    pos = np.nonzero(t.labels[i, :k] == Source.POLICY)[0]
    assert len(pos) > 0
    want = lp[i, pos - 1, np.asarray(ids)[pos]]
    np.testing.assert_allclose(t.sampler_logprobs[i, pos], want, atol=2e-4, rtol=1e-4)


def random_params(cfg, seed):
  """init_params under jit: one compile instead of op-by-op dispatch (much faster on CPU)."""
  return jax.jit(lambda key: init_params(cfg, key))(jax.random.PRNGKey(seed))


class Keep:
  """Remembers the sampler state after the last call (the engine donates old states)."""

  def __init__(self, sampler):
    self.s = sampler
    self.eos_ids, self.config = sampler.eos_ids, sampler.config
    self.stop_strings, self.max_extend = sampler.stop_strings, sampler.max_extend
    self.row_multiple, self.max_prompt_len = sampler.row_multiple, sampler.max_prompt_len

  def __getattr__(self, name):
    fn = getattr(self.s, name)

    def call(*a, **kw):
      out = fn(*a, **kw)
      self.state = out[0] if isinstance(out, tuple) else out
      return out
    return call


def test_random_model_rollout_matches_sampler_and_teacher_forcing():
  tok = h.tokenizer()
  cfg = PRESETS["tiny"]
  params = random_params(cfg, 0)
  proto = get_protocol("search_r1", max_turns=2)
  pol = Keep(sampler_for(cfg, params, tok, proto))
  ret = h.CountingRetriever(h.bm25_retriever())
  batch = RolloutEngine(proto, pol, ret, tok).run(["Where is Quillport", "Who founded it"],
                                                  samples_per_prompt=2, seed=5)
  h.check_alignment(batch)
  assert list(batch.traj.group_id) == [0, 0, 1, 1]
  assert len(ret.calls) == sum(1 for t in range(3) if any(
      r.action == "search" and r.turn == t for m in batch.meta.rows for r in m.turns))
  check_against_sampler(batch, pol.s, pol.state, cfg, params)


def search_chain_params(tok, seed=0, text=None):
  """Weights whose greedy continuation of a newline is `text` (a first-order token chain)."""
  text = SEARCH if text is None else text
  cfg = dataclasses.replace(PRESETS["tiny"], tie_word_embeddings=False)
  params = jax.tree_util.tree_map(np.asarray, random_params(cfg, seed))
  params = jax.tree_util.tree_map(np.array, params)
  for name in params:
    if name.startswith("layers_"):
      params[name]["self_attn"]["o_proj"]["kernel"][:] = 0
      params[name]["mlp"]["down_proj"]["kernel"][:] = 0
  emb = np.random.default_rng(seed).normal(size=params["embed_tokens"]["embedding"].shape)
  params["embed_tokens"]["embedding"][:] = emb
  head = np.zeros_like(params["lm_head"]["kernel"])
  chain = tok("\n", add_special_tokens=False)["input_ids"] + \
      tok(text, add_special_tokens=False)["input_ids"]
  for u, v in zip(chain[:-1], chain[1:]):
    head[:, v] += 30.0 * emb[u] / np.linalg.norm(emb[u])
  params["lm_head"]["kernel"][:] = head
  return cfg, jax.tree_util.tree_map(jnp.asarray, params)


@pytest.fixture(scope="module")
def chain_sampler():
  """One compiled sampler (batch 2) reused with different chain weights via set_params."""
  tok = h.tokenizer()
  cfg, params = search_chain_params(tok)
  return cfg, params, sampler_for(cfg, params, tok, get_protocol("search_r1"), greedy=True)


def test_scripted_weights_search_every_turn_through_real_sampler(chain_sampler):
  tok = h.tokenizer()
  cfg, params, sampler = chain_sampler
  sampler.set_params(params)
  proto = get_protocol("search_r1", max_turns=2)
  pol = Keep(sampler)
  ret = h.CountingRetriever(h.bm25_retriever())
  batch = RolloutEngine(proto, pol, ret, tok).run(["Where is Quillport"], samples_per_prompt=2)
  h.check_alignment(batch)
  for m in batch.meta.rows:
    assert [r.action for r in m.turns] == ["search", "search", "end"]
    assert m.queries == ["Tessaly River", "Tessaly River"]
    assert m.stop_reason == "max_turns"
    assert all(r.text == SEARCH for r in m.turns)
  # one call per turn, both rows' queries in it; the final turn's search is not served
  assert ret.calls == [(["Tessaly River"] * 2, 3)] * 2
  t = batch.traj
  k = int(t.lengths[0])
  assert tok.decode(t.tokens[0, :k][t.labels[0, :k] == Source.RETRIEVED].tolist()) == (
      'Doc 1(Title: "Tessaly River") The Tessaly River flows through Quillport into the Amber '
      'Sea.') * 2
  check_against_sampler(batch, pol.s, pol.state, cfg, params)


def test_chunked_turns_search_through_the_retrieval_thread(chain_sampler):
  """`decode_chunk` on the searching model: the chunked run gives the whole-turn trajectory and
  documents, and a retriever that fails (a server past its deadline) fails the run with its
  own error, raised from the retrieval thread, instead of hanging it."""
  tok = h.tokenizer()
  cfg, params, sampler = chain_sampler
  sampler.set_params(params)
  proto = get_protocol("search_r1", max_turns=2)
  runs = {}
  for chunk in (0, 5):
    ret = h.CountingRetriever(h.bm25_retriever())
    eng = RolloutEngine(proto, sampler, ret, tok, EngineConfig(decode_chunk=chunk))
    runs[chunk] = eng.run(["Where is Quillport"], samples_per_prompt=2)
    assert ret.calls == [(["Tessaly River"] * 2, 3)] * 2
  np.testing.assert_array_equal(runs[0].traj.tokens, runs[5].traj.tokens)
  np.testing.assert_array_equal(runs[0].traj.labels, runs[5].traj.labels)
  assert [[t.doc_ids for t in m.turns] for m in runs[0].rows] == \
      [[t.doc_ids for t in m.turns] for m in runs[5].rows]

  class DownRetriever:
    def search(self, queries, k):
      raise TimeoutError("retrieval server at 127.0.0.1:1 did not answer within 30 s")

  eng = RolloutEngine(proto, sampler, DownRetriever(), tok, EngineConfig(decode_chunk=5))
  with pytest.raises(TimeoutError, match="did not answer"):
    eng.run(["Where is Quillport"], samples_per_prompt=2)


def test_rex_rag_clone_truncate_extend_on_the_real_sampler(chain_sampler):
  """A wrong answer is cloned into the spare row, cut before `<answer>`, given the probe prompt
  and continued; the clone's cache must hold exactly its trajectory."""
  tok = h.tokenizer()
  cfg, _, sampler = chain_sampler
  _, params = search_chain_params(tok, text="<answer> Paris </answer>")
  sampler.set_params(params)
  proto = get_protocol("rex_rag", max_turns=2)
  pol = Keep(sampler)
  hook = RexRagCloneHook(is_wrong=lambda g, a: a != "Quillport", p=1.0, prompts=EXPLORATION_PROMPTS[:1])
  batch = RolloutEngine(proto, pol, h.bm25_retriever(), tok, EngineConfig(spare_rows=1),
                        hooks=[hook]).run(["Where is Quillport"], samples_per_prompt=1)
  h.check_alignment(batch)
  m = batch.meta
  assert [r.clone_of for r in m.rows] == [None, 0] and list(batch.traj.group_id) == [0, 0]
  assert m.rows[0].answer == "Paris" and m.rows[1].sampler_row == 1
  t = batch.traj
  p = int(t.prompt_lengths[1])
  assert t.tokens[1, :p].tolist() == t.tokens[0, :p].tolist()
  inj = np.nonzero(t.labels[1] == Source.INJECTED)[0]
  assert inj[0] == p                     # the whole answer turn was deleted, the probe follows
  assert tok.decode(t.tokens[1, inj].tolist()) == EXPLORATION_PROMPTS[0]
  assert (t.labels[1, inj[-1] + 1:int(t.lengths[1])] != Source.PROMPT).all()
  assert sampler.trace_counts["clone"] == 1 and sampler.trace_counts["truncate"] == 1
  check_against_sampler(batch, sampler, pol.state, cfg, params)


def staggered(seed, **sampling):
  """A random tiny model, Search-R1 with 4 turns and five prompts whose rows end at different
  turns in a 704-slot cache (the long prompts are cut and run out of room a turn early)."""
  tok = h.tokenizer()
  cfg = PRESETS["tiny"]
  proto = get_protocol("search_r1", max_turns=4)
  conf = SamplerConfig(max_cache_length=704, max_new_tokens=16, prompt_buckets=(256,),
                       extend_buckets=(32, 128, 256), stop_strings=proto.stop_sequences,
                       eos_ids=(tok.eos_token_id,), **sampling)
  prompts = ["Where is Quillport " * 6, "Who founded it", "Who " * 60, "Amber Sea?", "1912 " * 8]
  return tok, cfg, random_params(cfg, seed), proto, conf, prompts


@pytest.mark.parametrize("greedy", [True, False])
def test_refilled_waves_give_one_big_wave_and_free_rows_early(greedy):
  """Continuous batching (`EngineConfig.refill`): rows that finish give their sampler rows to
  the next prompts' groups while the other rows go on.  A 704-slot cache makes the rows of the
  long (cut) prompts end one turn before the others, so refills happen mid-wave: five prompts
  x 2 samples in 4 sampler rows take 12 decode calls instead of the fixed waves' 14, and give
  the tokens, labels and log-probs of all 10 rows at once."""
  tok, cfg, params, proto, conf, prompts = staggered(0, greedy=greedy)

  class CountingSampler(Sampler):
    decodes = 0

    def decode(self, state, steps=None):
      CountingSampler.decodes += 1
      return super().decode(state, steps)

  sampler = CountingSampler(cfg, params, tok, conf)
  out, decodes = {}, {}
  for wave, refill in ((0, True), (4, True), (4, False)):
    eng = RolloutEngine(proto, sampler, h.bm25_retriever(), tok,
                        EngineConfig(wave_rows=wave, refill=refill))
    CountingSampler.decodes = 0
    with pytest.warns(UserWarning, match="middle is cut"):
      out[wave, refill] = eng.run(prompts, samples_per_prompt=2, seed=7)
    decodes[wave, refill] = CountingSampler.decodes
  one, refilled, fixed = out[0, True], out[4, True], out[4, False]
  turns = [len(m.turns) for m in one.rows]
  assert turns == [4, 4, 5, 5, 4, 4, 5, 5, 4, 4]            # staggered endings
  assert refilled.stats["refilled_groups"] == 3 and "refilled_groups" not in fixed.stats
  assert decodes == {(0, True): 5, (4, True): 12, (4, False): 14}
  # prompt 2 took the rows prompt 0 freed while prompt 1 was still decoding its last turn
  assert [m.sampler_row for m in refilled.rows] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
  assert [m.row for m in refilled.rows] == list(range(10))
  for other in (refilled, fixed):
    np.testing.assert_array_equal(np.asarray(one.traj.tokens), np.asarray(other.traj.tokens))
    np.testing.assert_array_equal(np.asarray(one.traj.labels), np.asarray(other.traj.labels))
    np.testing.assert_allclose(np.asarray(one.traj.sampler_logprobs),
                               np.asarray(other.traj.sampler_logprobs), atol=1e-5)
    assert one.meta.response_texts == other.meta.response_texts
    assert [m.stop_reason for m in one.rows] == [m.stop_reason for m in other.rows]
  # a hook that clones takes the wave's spare rows: its waves stay fixed
  hooked = RolloutEngine(proto, sampler, h.bm25_retriever(), tok, EngineConfig(wave_rows=4),
                         hooks=[RexRagCloneHook(p=0.0)])
  assert not hooked.refills() and not eng.refills()        # eng: refill=False
  assert RolloutEngine(proto, sampler, h.bm25_retriever(), tok, EngineConfig(wave_rows=4)).refills()


@pytest.mark.parametrize("greedy", [True, False])
def test_chunked_turns_change_no_trajectory(greedy):
  """`decode_chunk`: turns decoded a few steps per call and each row's turn handled when it
  ends, its observation extended when the turn has ended, with and without refilled waves:
  the tokens, labels, log-probs, texts and stop reasons of whole turns, on rows whose turns end at different steps and whose rollouts end at different turns.
  (The random model writes invalid actions; searches through the retrieval thread are checked
  on the planted policy of tests/test_bench_rollout.py.)"""
  tok, cfg, params, proto, conf, prompts = staggered(3, greedy=greedy, temperature=1.5)
  sampler = Sampler(cfg, params, tok, conf)
  runs = {}
  for key in [(0, 0), (0, 3), (4, 5), (4, 2)]:
    wave, chunk = key
    eng = RolloutEngine(proto, sampler, h.bm25_retriever(), tok, EngineConfig(
        wave_rows=wave, decode_chunk=chunk))
    assert eng.streams() == bool(chunk)
    with pytest.warns(UserWarning, match="middle is cut"):
      runs[key] = eng.run(prompts, samples_per_prompt=2, seed=7)
  base = runs[0, 0]
  assert len({len(m.turns) for m in base.rows}) > 1
  assert len({len(t.text) for m in base.rows for t in m.turns}) > 1
  for key, other in runs.items():
    np.testing.assert_array_equal(np.asarray(base.traj.tokens), np.asarray(other.traj.tokens))
    np.testing.assert_array_equal(np.asarray(base.traj.labels), np.asarray(other.traj.labels))
    np.testing.assert_allclose(np.asarray(base.traj.sampler_logprobs),
                               np.asarray(other.traj.sampler_logprobs), atol=1e-5)
    assert base.meta.response_texts == other.meta.response_texts, key
    assert [m.stop_reason for m in base.rows] == [m.stop_reason for m in other.rows], key
    if greedy:         # and the cache held exactly the trajectory (no row decoded while held)
      check_teacher_forced(other, cfg, params)
  # a hook, a restart protocol, a policy without chunked decode: whole turns
  ret = h.bm25_retriever()
  assert not RolloutEngine(proto, sampler, ret, tok, EngineConfig(decode_chunk=4),
                           hooks=[RexRagCloneHook(p=0.0)]).streams()
  assert not RolloutEngine(get_protocol("r3_rag"), sampler, ret, tok,
                           EngineConfig(decode_chunk=4)).streams()
  assert not RolloutEngine(proto, h.ScriptedPolicy(tok, {}), ret, tok,
                           EngineConfig(decode_chunk=4)).streams()


def test_an_over_long_prompt_loses_its_middle_and_is_counted():
  """A question longer than the sampler's largest prompt bucket keeps its head and tail and the
  batch runs (issue 28 #7: one long question used to abort a whole evaluation)."""
  tok = h.tokenizer()
  cfg = PRESETS["tiny"]
  proto = get_protocol("search_r1", max_turns=1)
  sampler = sampler_for(cfg, random_params(cfg, 0), tok, proto)
  long_q = "Where is Quillport " + "and the Tessaly River " * 80 + "in the end"
  eng = RolloutEngine(proto, sampler, h.bm25_retriever(), tok)
  with pytest.warns(UserWarning, match="middle is cut"):
    batch = eng.run(["Who founded it", long_q])
  assert batch.stats == {"prompts_truncated": 1}
  full = eng.renderer.prompt_ids(as_prompt_input(long_q))
  prompt = batch.traj.labels == Source.PROMPT
  kept = batch.traj.tokens[1][prompt[1]].tolist()
  assert len(full) > 256 and len(kept) == 256
  assert kept[:128] == full[:128] and kept[128:] == full[-128:]
  assert prompt[0].sum() < 256
