"""Property test: arbitrary generated text through every protocol's parser and the assembler.

Whatever the policy writes (broken tags, stray special tokens, emoji, nothing), a rollout never
raises, labels / mask / log-probs / turns line up with the tokens, retrieved and environment
tokens always have loss mask 0, each turn makes at most one retrieval call carrying exactly the
searching rows' queries, and the sampler's history equals the trajectory.
"""

import os
import sys

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax import registry  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.renderer import Renderer  # noqa: E402
from ragjax.rollout.rex_rag import RexRagCloneHook  # noqa: E402

FRAGMENTS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>",
             "<information>", "</information>", " Tessaly River ", "Amber Sea", " chronicle ",
             "<|begin_of_query|>", "<|end_of_query|>", "\\boxed{", "}", "Step 1:\n",
             "The problem analysis:", "The retrieval query:", "The final answer:", "\nStep",
             "The retrieval documents:", "<|im_end|>", "<|im_start|>", "?", "\n", " ", "😀", "é",
             "the correct answer is: B", '"']

junk = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=3).map("".join)
word = st.one_of(st.sampled_from(["Tessaly River", "Amber Sea", "chronicle harbour event",
                                  "Mirela Dunst", "zzz", "", " "]), st.text(max_size=8))
action = st.one_of(
    word.map(lambda q: f"<search>{q}</search>"), word.map(lambda a: f"<answer>{a}</answer>"),
    word.map(lambda q: f"<|begin_of_query|>{q}<|end_of_query|>"),
    word.map(lambda a: "\\boxed{" + a + "}"),
    word.map(lambda q: f"Step 1:\nThe problem analysis: x.\nThe retrieval query: {q}"),
    word.map(lambda a: f"Step 2:\nThe problem analysis: y.\nThe final answer: {a}"),
    st.just(""))
turn_text = st.tuples(junk, action, junk, st.sampled_from(["", "<|im_end|>"])).map("".join)


@st.composite
def scenarios(draw):
  name = draw(st.sampled_from(registry.names("protocol")))
  overrides = {"max_turns": draw(st.integers(1, 3))}
  if name == "rezero":
    overrides["today"] = "01 Jan 2026"
  if draw(st.booleans()):
    overrides["force_answer_text"] = draw(st.sampled_from(["\nAnswer now.\n", "<answer>"]))
  proto = get_protocol(name, **overrides)
  rows = draw(st.integers(1, 3))
  scripts = {r: draw(st.lists(turn_text, min_size=1, max_size=5)) for r in range(rows + 4)}
  chat = draw(st.booleans())
  room = draw(st.one_of(st.sampled_from([40, 400, 4000]), st.integers(8, 600)))
  new_tokens = draw(st.one_of(st.sampled_from([64, 64, 8]), st.integers(1, 40)))
  clone_p = draw(st.sampled_from([0.0, 0.5, 1.0])) if name in ("search_r1", "rex_rag") else None
  train_injected = draw(st.booleans())
  return proto, rows, scripts, chat, room, new_tokens, clone_p, train_injected


SEARCH_TR = "<search>Tessaly River</search>"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(sc=(get_protocol("rex_rag", max_turns=1), 3,   # a clone's probe prompt overflowing the
             {**{r: [SEARCH_TR] for r in range(7)},     # cache (found by this test, 2026-11-23)
              2: ["<answer>Tessaly River</answer>"]}, False, 40, 64, 0.5, False))
def test_any_text_rolls_out_aligned(sc):
  proto, rows, scripts, chat, room, new_tokens, clone_p, train_injected = sc
  tok = h.tokenizer(chat)
  prompt_len = len(Renderer(proto, tok).prompt_ids("Where is Quillport"))
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences,
                         max_new_tokens=new_tokens, cache_length=prompt_len + room)
  ret = h.CountingRetriever(h.bm25_retriever())
  hooks, spare = [], 0
  if clone_p is not None:
    hooks, spare = [RexRagCloneHook(is_wrong=lambda g, a: True, p=clone_p, seed=1)], 2
  eng = RolloutEngine(proto, pol, ret, tok,
                      EngineConfig(spare_rows=spare),
                      hooks=hooks)
  batch = eng.run(["Where is Quillport"], samples_per_prompt=rows)

  h.check_alignment(batch)
  t = batch.traj
  labels = np.asarray(t.labels)
  mask = loss_mask(t.labels, ("policy", "injected") if train_injected else ("policy",))
  assert not mask[(labels == Source.RETRIEVED) | (labels == Source.ENV)].any()
  assert (mask[labels == Source.INJECTED] == float(train_injected)).all()
  assert eng.retrieval_calls == len(ret.calls)
  for i, meta in enumerate(batch.meta.rows):
    k = int(t.lengths[i])
    assert k <= prompt_len + room
    assert pol.state.histories[meta.sampler_row][:k] == t.tokens[i, :k].tolist()
    pos = np.nonzero(labels[i, :k] == Source.POLICY)[0]
    np.testing.assert_allclose(t.sampler_logprobs[i, pos], [h.slot_logprob(j) for j in pos])
    assert meta.stop_reason
    assert (meta.answer is not None) == (meta.stop_reason == "answer")
    assert len(meta.turns) <= proto.max_turns + int(proto.final_turn)
  # the queries of each call are exactly the rows that searched in that turn
  by_turn = {}
  for meta in batch.meta.rows:
    for rec in meta.turns:
      if meta.cloned_at_turn is not None and rec.turn < meta.cloned_at_turn:
        continue                     # the source's history, retrieved once for the source
      if rec.action == "search":
        by_turn.setdefault(rec.turn, []).append(rec.query)
  assert sorted(sorted(q) for q, _ in ret.calls) == sorted(sorted(v) for v in by_turn.values())
  event_stats.append((proto.name, tuple(batch.meta.stop_reasons), len(batch.meta),
                      len(ret.calls)))


event_stats = []
