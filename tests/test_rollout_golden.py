"""Golden rollouts per protocol: a scripted policy (forced tokens) against a real BM25 index.

Each expected trajectory is written out as (text, label, turn) pieces; pieces are tokenised one
by one, which is exactly how the scripted policy emits a turn and how the engine tokenises
environment text, so a label or boundary mistake shows up as a token-level mismatch.
"""

import sys
import os

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.protocols.base import search_r1_docs  # noqa: E402
from ragjax.rollout.protocols import search_r1 as sr1  # noqa: E402
from ragjax.rollout.protocols import ur2 as ur2_lib  # noqa: E402

P, POL, RET, ENV, INJ = Source.PROMPT, Source.POLICY, Source.RETRIEVED, Source.ENV, Source.INJECTED
Q = "What is the capital of Zorbland"
EOS = "<|im_end|>"
DOC_TESSALY = 'Doc 1(Title: "Tessaly River") The Tessaly River flows through Quillport into the Amber Sea.'
DOC_AMBER = ('Doc 1(Title: "Amber Sea") The Amber Sea borders Zorbland to the south and east.\n'
             'Doc 2(Title: "Tessaly River") The Tessaly River flows through Quillport into the Amber Sea.')
DOC_MIRELA = 'Doc 1(Title: "Mirela Dunst") Mirela Dunst founded the Quillport Observatory in 1871.'


def rollout(proto, scripts, prompts=(Q,), chat=True, policy_stops=None, cache_length=4096,
            max_new_tokens=64, **cfg):
  tok = h.tokenizer(chat)
  stops = proto.stop_sequences if policy_stops is None else policy_stops
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=stops, max_new_tokens=max_new_tokens,
                         cache_length=cache_length)
  ret = h.CountingRetriever(h.bm25_retriever())
  g = len(scripts) // len(prompts)
  eng = RolloutEngine(proto, pol, ret, tok, EngineConfig(**cfg))
  batch = eng.run(list(prompts), samples_per_prompt=g)
  h.check_alignment(batch)
  return batch, pol, ret, eng, tok


def expect_row(batch, eng, tok, i, pieces, prompt=Q, train_on=("policy",)):
  """Row i is exactly the prompt followed by `pieces` [(text, label, turn)]."""
  ids = eng.renderer.prompt_ids(prompt)
  labels, turns = [int(P)] * len(ids), [-1] * len(ids)
  for text, label, turn in pieces:
    piece = tok(text, add_special_tokens=False)["input_ids"]
    ids += piece
    labels += [int(label)] * len(piece)
    turns += [turn] * len(piece)
  t = batch.traj
  k = int(t.lengths[i])
  got = [(tok.decode([a]), Source(b).name, c) for a, b, c in
         zip(t.tokens[i, :k], t.labels[i, :k], t.turn[i, :k])]
  want = [(tok.decode([a]), Source(b).name, c) for a, b, c in zip(ids, labels, turns)]
  assert got == want
  assert list(t.tokens[i, :k]) == ids
  lab = np.asarray(labels)
  want_mask = (lab == POL) | ((lab == INJ) & ("injected" in train_on))
  np.testing.assert_array_equal(loss_mask(t.labels, train_on)[i, :k], want_mask.astype(np.float32))


def check_logprobs_and_history(batch, pol):
  """Policy log-probs sit at their sampler slot; the sampler history is the trajectory."""
  t = batch.traj
  for i, meta in enumerate(batch.meta.rows):
    k = int(t.lengths[i])
    pos = np.nonzero(t.labels[i, :k] == POL)[0]
    np.testing.assert_allclose(t.sampler_logprobs[i, pos], [h.slot_logprob(j) for j in pos])
    hist = pol.state.histories[meta.sampler_row]
    assert hist[:k] == list(t.tokens[i, :k])


# ---------------------------------------------------------------- Search-R1 ----------------

def test_search_r1_multi_turn_answer_unclosed_and_batched_retrieval():
  proto = get_protocol("search_r1")
  scripts = {
      0: ["<think> where </think> <search> Tessaly River </search>",
          "<think> sea? </think> <search> Amber Sea </search>",
          "<think> done </think> <answer> Quillport </answer>"],
      1: ["<think> I know </think> <answer> Quillport </answer>"],
      2: ["<think> hmm </think> <search> Tessaly River" + EOS, "<answer> x </answer>"],
      3: ["<search> Mirela Dunst </search>", "<answer> Mirela </answer>"],
  }
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  expect_row(batch, eng, tok, 0, [
      ("<think> where </think> <search> Tessaly River </search>", POL, 0),
      ("\n\n<information>", ENV, 0), (DOC_TESSALY, RET, 0), ("</information>\n\n", ENV, 0),
      ("<think> sea? </think> <search> Amber Sea </search>", POL, 1),
      ("\n\n<information>", ENV, 1), (DOC_AMBER, RET, 1), ("</information>\n\n", ENV, 1),
      ("<think> done </think> <answer> Quillport </answer>", POL, 2)])
  expect_row(batch, eng, tok, 1, [("<think> I know </think> <answer> Quillport </answer>", POL, 0)])
  # unclosed tag ended by eos: invalid action; the eos is dropped so the stream stays one message
  expect_row(batch, eng, tok, 2, [
      ("<think> hmm </think> <search> Tessaly River", POL, 0),
      (sr1.LONG_INVALID_MESSAGE, ENV, 0), ("<answer> x </answer>", POL, 1)])
  expect_row(batch, eng, tok, 3, [
      ("<search> Mirela Dunst </search>", POL, 0),
      ("\n\n<information>", ENV, 0), (DOC_MIRELA, RET, 0), ("</information>\n\n", ENV, 0),
      ("<answer> Mirela </answer>", POL, 1)])
  m = batch.meta
  assert m.stop_reasons == ["answer"] * 4
  assert m.answers == ["Quillport", "Quillport", "x", "Mirela"]
  assert m.queries == [["Tessaly River", "Amber Sea"], [], [], ["Mirela Dunst"]]
  assert m.doc_ids[0] == [("p4",), ("p5", "p4")]
  assert [r.turns[0].action for r in m.rows] == ["search", "answer", "invalid", "search"]
  # one retrieval call per turn for the whole batch: turn 0 carries both searching rows
  assert ret.calls == [(["Tessaly River", "Mirela Dunst"], 3), (["Amber Sea"], 3)]
  assert eng.retrieval_calls == 2
  assert list(batch.traj.group_id) == [0, 0, 0, 0]
  check_logprobs_and_history(batch, pol)


def test_group_ids_are_prompt_uids_not_samples():
  proto = get_protocol("search_r1")
  tok = h.tokenizer()
  scripts = {r: ["<answer> a </answer>"] for r in range(6)}
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok)
  batch = eng.run(["q one", "q two", "q three"], samples_per_prompt=2, uids=[70, 71, 72])
  assert list(batch.traj.group_id) == [70, 70, 71, 71, 72, 72]
  assert [r.prompt_index for r in batch.meta.rows] == [0, 0, 1, 1, 2, 2]
  assert [r.sample_index for r in batch.meta.rows] == [0, 1, 0, 1, 0, 1]


def test_search_r1_two_searches_in_one_turn():
  proto = get_protocol("search_r1")
  two = "<think> both </think> <search> Tessaly River </search> <search> Amber Sea </search>"
  scripts = {0: [two, "<answer> Quillport </answer>"]}
  # the sampler stops at the first </search>: the second search is never generated
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  expect_row(batch, eng, tok, 0, [
      ("<think> both </think> <search> Tessaly River </search>", POL, 0),
      ("\n\n<information>", ENV, 0), (DOC_TESSALY, RET, 0), ("</information>\n\n", ENV, 0),
      ("<answer> Quillport </answer>", POL, 1)])
  assert pol.calls["truncate"] == 0
  # a sampler without stop strings generates both: Search-R1 cuts after the first action and
  # the sampler row is truncated to match (tokens after the cut never reach the trajectory)
  with pytest.warns(UserWarning, match="does not stop on"):
    batch, pol, ret, eng, tok = rollout(proto, scripts, policy_stops=())
  expect_row(batch, eng, tok, 0, [
      ("<think> both </think> <search> Tessaly River </search>", POL, 0),
      ("\n\n<information>", ENV, 0), (DOC_TESSALY, RET, 0), ("</information>\n\n", ENV, 0),
      ("<answer> Quillport </answer>", POL, 1)])
  assert pol.calls["truncate"] == 1
  assert batch.meta.rows[0].turns[0].all_queries == ("Tessaly River", "Amber Sea")
  assert ret.calls == [(["Tessaly River"], 3)]
  check_logprobs_and_history(batch, pol)


def test_search_r1_overlong_observation_is_cut_in_tokens():
  proto = get_protocol("search_r1", obs_max_tokens=100)
  scripts = {0: ["<search> chronicle harbour event </search>", "<answer> a </answer>"]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  hits = h.bm25_retriever().search(["chronicle harbour event"], 3)[0]
  docs = search_r1_docs(hits).strip()
  doc_ids = tok(docs, add_special_tokens=False)["input_ids"]
  assert len(doc_ids) > 100
  t = batch.traj
  k = int(t.lengths[0])
  ret_pos = np.nonzero(t.labels[0, :k] == RET)[0]
  assert len(ret_pos) == 100
  assert list(t.tokens[0, ret_pos]) == doc_ids[:100]
  # the closing wrapper survives the cut
  after = tok.decode(t.tokens[0, ret_pos[-1] + 1:k].tolist())
  assert after.startswith("</information>\n\n")
  assert batch.meta.rows[0].turns[0].obs_truncated
  assert pol.calls["extend"] == 2      # 100 + wrapper tokens go in two 64-token extends
  check_logprobs_and_history(batch, pol)


def test_search_r1_max_turns_and_forced_final_answer():
  forced = "\nI have used my searches, so I answer now.\n"
  proto = get_protocol("search_r1", max_turns=2, force_answer_text=forced)
  s = "<search> Tessaly River </search>"
  scripts = {0: [s, s, s], 1: [s, s, "<answer> Quillport </answer>"]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  obs = [("\n\n<information>", ENV), (DOC_TESSALY, RET), ("</information>\n\n", ENV)]
  body = lambda t: [(s, POL, t)] + [(x, lab, t) for x, lab in obs]
  expect_row(batch, eng, tok, 0, body(0) + body(1) + [(forced, ENV, 2), (s, POL, 2)])
  expect_row(batch, eng, tok, 1, body(0) + body(1) + [(forced, ENV, 2),
                                                       ("<answer> Quillport </answer>", POL, 2)])
  assert batch.meta.stop_reasons == ["max_turns", "answer"]
  assert batch.meta.answers == [None, "Quillport"]
  assert len(ret.calls) == 2          # the final turn's search is not served
  assert batch.meta.rows[0].turns[2].reason == "search_in_final_turn"
  # without forced text (the papers' default) the final turn is a plain generation
  batch, pol, ret, eng, tok = rollout(get_protocol("search_r1", max_turns=2), scripts)
  expect_row(batch, eng, tok, 1, body(0) + body(1) + [("<answer> Quillport </answer>", POL, 2)])
  check_logprobs_and_history(batch, pol)


def test_search_r1_budget_and_cache_limits():
  proto = get_protocol("search_r1")
  s = "<search> chronicle harbour event </search>"
  scripts = {0: [s, s, s]}
  batch, pol, ret, eng, tok = rollout(proto, scripts, max_response_tokens=200)
  assert batch.meta.stop_reasons == ["budget"]
  t = batch.traj
  # the observation that would overflow the budget was not appended
  assert (t.labels[0, :int(t.lengths[0])] == RET).sum() == 0
  prompt_len = int(t.prompt_lengths[0])
  batch, pol, ret, eng, tok = rollout(proto, {0: ["<think>" + " a" * 200 + "</think>"]},
                                      cache_length=prompt_len + 30)
  assert batch.meta.stop_reasons == ["budget"]
  assert int(batch.traj.lengths[0]) == prompt_len + 30
  check_logprobs_and_history(batch, pol)


def test_rex_rag_invalid_message():
  proto = get_protocol("rex_rag")
  assert proto.max_turns == 5
  batch, pol, ret, eng, tok = rollout(proto, {0: ["no tags here", "<answer> a </answer>"]})
  expect_row(batch, eng, tok, 0, [("no tags here", POL, 0), ("\nMy action is invalid. ", ENV, 0),
                                  ("<answer> a </answer>", POL, 1)])


# ---------------------------------------------------------------- AutoRefine ---------------

def test_autorefine_documents_refine_and_invalid():
  proto = get_protocol("autorefine")
  scripts = {0: ["<think> who </think> <search> Mirela Dunst </search>",
                 "<refine> Mirela Dunst founded it in 1871 </refine> <answer> Mirela Dunst </answer>"],
             1: ["just words" + EOS, "<answer> b </answer>"]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  expect_row(batch, eng, tok, 0, [
      ("<think> who </think> <search> Mirela Dunst </search>", POL, 0),
      ("\n\n<documents>", ENV, 0), (DOC_MIRELA, RET, 0), ("</documents>\n\n", ENV, 0),
      ("<refine> Mirela Dunst founded it in 1871 </refine> <answer> Mirela Dunst </answer>", POL, 1)])
  expect_row(batch, eng, tok, 1, [("just words", POL, 0), (sr1.LONG_INVALID_MESSAGE, ENV, 0),
                                  ("<answer> b </answer>", POL, 1)])
  assert batch.meta.answers == ["Mirela Dunst", "b"]
  check_logprobs_and_history(batch, pol)


# ---------------------------------------------------------------- R3-RAG -------------------

def test_r3_rag_steps_dedup_truncation_format_and_max_turns():
  proto = get_protocol("r3_rag", max_turns=3, context="stream")
  step1 = ("Step 1:\nThe problem analysis: find the founder.\n"
           "The retrieval query: Quillport Observatory founder?")
  step2 = "Step 2:\nThe problem analysis: check the name.\nThe retrieval query: Mirela Dunst"
  step3 = "Step 3:\nThe problem analysis: known now.\nThe final answer: Mirela Dunst"
  long_q = "Step 1:\nThe problem analysis: a.\nThe retrieval query: chronicle harbour event"
  scripts = {
      0: [step1 + "\nStep 2:", step2 + EOS, step3 + EOS],
      1: ["Step 1:\nI think it is Quillport." + EOS],
      2: [long_q + EOS, long_q + EOS, long_q + EOS],
  }
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  store = {i: (f'"{t}"\n{x}' if t else x) for i, t, x in h.PASSAGES}
  docs1 = store["p3"] + "\n" + store["p2"]
  expect_row(batch, eng, tok, 0, [
      (step1, POL, 0),     # "\nStep" that stopped the turn is cut off (the next step's header)
      ("\nThe retrieval documents: ", ENV, 0), (docs1, RET, 0), ("\n\n", ENV, 0),
      (step2, POL, 1),     # eos before an observation is dropped (one assistant stream)
      ("\nThe retrieval documents: ", ENV, 1), ("\n\n", ENV, 1),   # p2 already seen: no docs
      (step3 + EOS, POL, 2)])
  assert batch.meta.rows[0].doc_ids == [("p3", "p2"), ()]
  assert batch.meta.rows[0].queries == ["Quillport Observatory founder", "Mirela Dunst"]
  assert batch.meta.rows[0].answer == "Mirela Dunst"
  expect_row(batch, eng, tok, 1, [("Step 1:\nI think it is Quillport." + EOS, POL, 0)])
  assert batch.meta.stop_reasons == ["answer", "format_no_analysis", "max_turns"]
  # 512-character truncation of the joined document string
  t = batch.traj
  k = int(t.lengths[2])
  first_obs = (t.labels[2, :k] == RET) & (t.turn[2, :k] == 0)
  assert tok.decode(t.tokens[2, :k][first_obs].tolist()) == (store["p7"] + "\n" + store["p1"])[:512]
  # row 2 searched in every turn: its last-turn query is served too (R3-RAG scores its
  # documents) and the row then ends without another observation or decode
  assert [c[0] for c in ret.calls] == [["Quillport Observatory founder", "chronicle harbour event"],
                                       ["Mirela Dunst", "chronicle harbour event"],
                                       ["chronicle harbour event"]]
  assert [t.action for t in batch.meta.rows[2].turns] == ["search"] * 3
  check_logprobs_and_history(batch, pol)


def test_r3_rag_restart_each_step_a_fresh_chat_and_its_own_sample():
  """The paper's layout: every step is a fresh single-turn chat whose user message holds the
  question, the earlier steps and their documents; each (prompt, step) is a step sample, the
  sampler keeps the shared prefix and is extended with the rest."""
  proto = get_protocol("r3_rag", max_turns=3, step_header=True)
  assert proto.context == "restart"
  step1 = ("Step 1:\nThe problem analysis: find the founder.\n"
           "The retrieval query: Quillport Observatory founder")
  step2 = "Step 2:\nThe problem analysis: check the name.\nThe retrieval query: Mirela Dunst"
  step3 = "Step 3:\nThe problem analysis: known now.\nThe final answer: Mirela Dunst"
  scripts = {0: [step1 + EOS, step2 + EOS, step3 + EOS],
             1: ["The problem analysis: no header.\nThe final answer: x" + EOS]}
  batch, pol, ret, eng, tok = rollout(proto, scripts, prompts=(Q,))
  store = {i: (f'"{t}"\n{x}' if t else x) for i, t, x in h.PASSAGES}
  docs1 = store["p3"] + "\n" + store["p2"]
  s = batch.samples
  assert list(s.row) == [0, 0, 0, 1] and list(s.turn) == [0, 1, 2, 0]
  user = f"The question: {Q}"
  users = [user, f"{user}\n{step1}\nThe retrieval documents: {docs1}",
           f"{user}\n{step1}\nThe retrieval documents: {docs1}\n{step2}\nThe retrieval documents: "]
  t = s.traj
  for k, (u, step) in enumerate(zip(users, (step1, step2, step3))):
    n, p = int(t.lengths[k]), int(t.prompt_lengths[k])
    want = tok.apply_chat_template([{"role": "system", "content": "You are a helpful assistant."},
                                    {"role": "user", "content": u}], tokenize=False,
                                   add_generation_prompt=True)
    assert tok.decode(t.tokens[k, :p].tolist()) == want
    assert (t.labels[k, :p] == P).all() and (t.labels[k, p:n] == POL).all()
    assert list(t.tokens[k, p:n]) == tok(step + EOS, add_special_tokens=False)["input_ids"]
    assert (t.turn[k, p:n] == k).all() and (t.turn[k, :p] == -1).all()
    # log-probs sit at their sampler slot: the sampler's history was this very sample
    np.testing.assert_allclose(t.sampler_logprobs[k, p:n], [h.slot_logprob(j) for j in range(p, n)])
  # the trajectory row is the last sample; the sampler row holds exactly it
  row0 = batch.traj
  n = int(row0.lengths[0])
  assert list(row0.tokens[0, :n]) == list(t.tokens[2, :n])
  assert pol.state.histories[0][:n] == list(t.tokens[2, :n]) and pol.calls["truncate"] == 2
  m = batch.meta.rows[0]
  assert m.answer == "Mirela Dunst" and m.stop_reason == "answer"
  assert m.doc_ids == [("p3", "p2"), ()]
  assert m.response_text.startswith(step1 + "\nThe retrieval documents: " + docs1)
  assert m.response_text.endswith(step3)
  assert [(r.start, r.end) for r in m.turns] == [(int(t.prompt_lengths[k]), int(t.lengths[k]))
                                                 for k in range(3)]
  assert batch.meta.rows[1].stop_reason == "format_step_header"
  h.check_alignment(batch)


# ---------------------------------------------------------------- UR² ----------------------

def test_ur2_queries_documents_fallback_and_endings():
  proto = get_protocol("ur2", max_turns=1)
  q = lambda s: f"Let me check. <|begin_of_query|> {s} <|end_of_query|>"
  scripts = {0: [q("Tessaly River"), "So it is \\boxed{Quillport}" + EOS],
             1: [q("design computation reasoning"), "Then \\boxed{42}" + EOS],
             2: ['<|begin_of_query|> " " <|end_of_query|>'],
             3: ["I am unsure." + EOS],
             4: [q("Amber Sea"), q("Tessaly River")]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  store = {i: (f'"{t}"\n{x}' if t else x) for i, t, x in h.PASSAGES}
  docs = lambda *ids: "".join(store[i] + "\n" for i in ids)
  expect_row(batch, eng, tok, 0, [
      (q("Tessaly River"), POL, 0), ("\n\n<|begin_of_documents|>\n", ENV, 0),
      (docs("p4"), RET, 0), ("<|end_of_documents|>\n\n", ENV, 0),
      ("So it is \\boxed{Quillport}" + EOS, POL, 1)])
  expect_row(batch, eng, tok, 1, [
      (q("design computation reasoning"), POL, 0), ("\n\n<|begin_of_documents|>\n", ENV, 0),
      (docs("p6"), RET, 0), ("<|end_of_documents|>\n\n", ENV, 0),
      (ur2_lib.FALLBACK_NOTICE, ENV, 0), ("Then \\boxed{42}" + EOS, POL, 1)])
  expect_row(batch, eng, tok, 4, [
      (q("Amber Sea"), POL, 0), ("\n\n<|begin_of_documents|>\n", ENV, 0),
      (docs("p5", "p4"), RET, 0), ("<|end_of_documents|>\n\n", ENV, 0),
      (q("Tessaly River"), POL, 1)])
  assert batch.meta.stop_reasons == ["answer", "answer", "empty_query", "no_answer", "max_turns"]
  assert batch.meta.answers[:2] == ["Quillport", "42"]
  # three rows searched in turn 0: one call; the final turn's query is never served
  assert ret.calls == [(["Tessaly River", "design computation reasoning", "Amber Sea"], 10)]
  check_logprobs_and_history(batch, pol)


class ContextRetriever(h.CountingRetriever):
  """A real BM25 index behind `search_with_context`, recording what the engine passed."""

  def __init__(self, inner):
    super().__init__(inner)
    self.contexts = []

  def search_with_context(self, queries, k, **contexts):
    self.contexts.append(contexts)
    return self.search(queries, k)


def test_ur2_per_example_task_prompt_and_retrieval_context():
  """Each record's own task and retrieval flag pick its prompt; a context-taking retriever gets
  each query's task and the response before its last `<|begin_of_query|>`."""
  proto = get_protocol("ur2", max_turns=2)
  tok = h.tokenizer(True)
  q = lambda s: f"<|begin_of_query|> {s} <|end_of_query|>"
  prompts = [{"id": "m", "question": "1+1", "golden_answers": ["2"], "task": "math",
              "retrieval": False},
             {"id": "c", "question": "Capital?", "golden_answers": ["A"],
              "options": ["Quillport", "Zorb"],
              "metadata": {"task": "mcq", "retrieval": True}},
             {"id": "a", "question": Q, "golden_answers": ["Quillport"]}]
  scripts = {0: ["\\boxed{2}" + EOS],
             1: ["Check. " + q("Tessaly River"), "More. " + q("Amber Sea"),
                 "the correct answer is: A" + EOS],
             2: [q("Mirela Dunst"), "\\boxed{Quillport}" + EOS]}
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  ret = ContextRetriever(h.bm25_retriever())
  eng = RolloutEngine(proto, pol, ret, tok, EngineConfig())
  batch = eng.run(prompts)
  text = lambda i: tok.decode(batch.traj.tokens[i, :batch.traj.prompt_lengths[i]])
  assert ur2_lib.MATH_COT in text(0) and "Question: 1+1" in text(0)
  assert ur2_lib.MCQ_RETRIEVAL in text(1) and "Options:\nA. Quillport\nB. Zorb" in text(1)
  assert ur2_lib.QA_RETRIEVAL in text(2)
  assert batch.meta.answers == ["2", "A", "Quillport"]
  assert [c[0] for c in ret.calls] == [["Tessaly River", "Mirela Dunst"], ["Amber Sea"]]
  first, second = ret.contexts
  assert first["tasks"] == ["mcq", "qa"] and first["prev_reasoning"] == ["Check. ", ""]
  docs = "\n\n<|begin_of_documents|>\n\"Tessaly River\"\nThe Tessaly River flows through " \
         "Quillport into the Amber Sea.\n<|end_of_documents|>\n\n"
  assert second == {"tasks": ["mcq"],
                    "prev_reasoning": ["Check. " + q("Tessaly River") + docs + "More. "]}
  # a plain retriever gets plain searches
  plain = h.CountingRetriever(h.bm25_retriever())
  RolloutEngine(proto, h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences), plain,
                tok, EngineConfig()).run(prompts)
  assert [c[0] for c in plain.calls] == [c[0] for c in ret.calls]


def test_per_example_fields_are_checked():
  from ragjax.rollout.protocols.base import as_prompt_input
  assert as_prompt_input({"question": "q", "metadata": {"task": "math"}}).task == "math"
  assert as_prompt_input({"question": "q", "task": "qa", "metadata": {"task": "math"}}).task == "qa"
  with pytest.raises(ValueError, match="'retrieval' must be true or false"):
    as_prompt_input({"id": "x1", "question": "q", "retrieval": "yes"})
  with pytest.raises(ValueError, match="task must be 'qa', 'math' or 'mcq'"):
    get_protocol("ur2").system_message(as_prompt_input({"question": "q", "task": "poetry"}))


# ---------------------------------------------------------------- ReZero -------------------

def test_rezero_user_messages_last_search_and_endings():
  proto = get_protocol("rezero", today="22 Nov 2026")
  t0 = "<think> a </think> <search> Tessaly River </search>" + EOS
  t1 = "<think> b </think> <search> Amber Sea </search> <search> Mirela Dunst </search>" + EOS
  t2 = "<think> c </think> <answer> Mirela Dunst </answer>" + EOS
  scripts = {0: [t0, t1, t2], 1: ["I will not use tags." + EOS]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  store = {i: (f'"{t}"\n{x}' if t else x) for i, t, x in h.PASSAGES}
  res = lambda *ids: "".join(f"Result {j + 1}:\n{store[i]}\n------\n" for j, i in enumerate(ids))
  user = lambda t, r: [("\n<|im_start|>user\n", ENV, t), ("<information>", ENV, t), (r, RET, t),
                       ("</information>", ENV, t), ("<|im_end|>\n<|im_start|>assistant\n", ENV, t)]
  expect_row(batch, eng, tok, 0, [(t0, POL, 0)] + user(0, res("p4")) + [(t1, POL, 1)]
             + user(1, res("p2")) + [(t2, POL, 2)])
  assert batch.meta.rows[0].queries == ["Tessaly River", "Mirela Dunst"]   # last search wins
  assert batch.meta.rows[0].turns[1].all_queries == ("Amber Sea", "Mirela Dunst")
  assert batch.meta.stop_reasons == ["answer", "no_action"]
  # prompt: system message with the date, then the user instruction (chat template)
  text = eng.renderer.prompt_text(Q)
  assert text.startswith("<|im_start|>system\nCutting Knowledge Date: December 2023\n"
                         "Today Date: 22 Nov 2026\n\nYou are a helpful assistant with search "
                         "capabilities.<|im_end|>\n<|im_start|>user\nAnswer the given question.")
  assert text.endswith(f"Question: {Q}\n<|im_end|>\n<|im_start|>assistant\n")
  check_logprobs_and_history(batch, pol)


def test_rezero_turn_without_eos_gets_full_framing_and_budget_stops():
  proto = get_protocol("rezero", today="22 Nov 2026", max_response_tokens=200)
  t0 = "<search> Tessaly River </search>"        # ends on the per-turn budget, not eos
  scripts = {0: [t0, t0, t0]}
  batch, pol, ret, eng, tok = rollout(proto, scripts, max_new_tokens=15)
  k = int(batch.traj.lengths[0])
  text = tok.decode(batch.traj.tokens[0, :k].tolist())
  assert "</search><|im_end|>\n<|im_start|>user\n<information>Result 1:" in text
  env = batch.traj.labels[0, :k] == ENV
  assert "<|im_end|>" in tok.decode(batch.traj.tokens[0, :k][env].tolist())
  assert batch.meta.stop_reasons == ["budget"]


def test_forced_final_text_that_does_not_fit_ends_the_row():
  forced = "\nI have used my searches, so I answer now.\n"
  proto = get_protocol("search_r1", max_turns=1, force_answer_text=forced)
  tok = h.tokenizer()
  s = "<search> Tessaly River </search>"
  # room for turn 0 and its observation, not for the forced text as well
  probe, *_ = rollout(get_protocol("search_r1", max_turns=1), {0: [s, s]})
  used = int(probe.traj.lengths[0]) - len(tok(s, add_special_tokens=False)["input_ids"])
  batch, pol, ret, eng, tok = rollout(proto, {0: [s, s]}, cache_length=used + 3)
  assert batch.meta.stop_reasons == ["budget"]
  k = int(batch.traj.lengths[0])
  assert forced not in tok.decode(batch.traj.tokens[0, :k].tolist())
  assert pol.calls["decode"] == 1


def test_trajectory_is_a_jittable_pytree_with_host_metadata_outside():
  import jax
  proto = get_protocol("search_r1")
  batch, *_ = rollout(proto, {0: ["<search> Tessaly River </search>", "<answer> a </answer>"],
                              1: ["<answer> b </answer>"]})
  t = batch.traj
  got = jax.jit(lambda tr: ((tr.labels == 2) * tr.sampler_logprobs).sum(axis=1))(t)
  np.testing.assert_allclose(np.asarray(got), (loss_mask(t.labels) * t.sampler_logprobs).sum(axis=1),
                             rtol=1e-6)
  assert len(jax.tree_util.tree_leaves(t)) == 7
  assert t.tokens.dtype == np.int32 and t.labels.dtype == np.int8
  assert loss_mask(t.labels).dtype == np.float32 and t.group_id.shape == (2,)
  assert t.tokens.shape[1] % 8 == 0                      # no widths: padded to a multiple of 8
  sub = t.select([1])
  assert sub.tokens.shape == (1, t.tokens.shape[1]) and int(sub.group_id[0]) == 0


def test_autorefine_searches_then_the_final_call_without_search_and_refine_off():
  """Two searches (max_turns=2 here, 5 in the paper), then one more call with search disabled:
  an answer there ends the row, a search there is not served.  `<refine>` text is policy
  (trained); `<documents>` wrappers and documents are not.  refine=False is Search-R1's."""
  proto = get_protocol("autorefine", max_turns=2)
  s1 = "<think> river? </think> <search> Tessaly River </search>"
  s2 = "<refine> it flows to the Amber Sea </refine> <search> Amber Sea </search>"
  last = "<refine> Quillport is on the river </refine> <answer> Quillport </answer>"
  scripts = {0: [s1, s2, last], 1: [s1, s2, "<search> Mirela Dunst </search>"]}
  batch, pol, ret, eng, tok = rollout(proto, scripts)
  docs = lambda d, t: [("\n\n<documents>", ENV, t), (d, RET, t), ("</documents>\n\n", ENV, t)]
  head = [(s1, POL, 0)] + docs(DOC_TESSALY, 0) + [(s2, POL, 1)] + docs(DOC_AMBER, 1)
  expect_row(batch, eng, tok, 0, head + [(last, POL, 2)])
  expect_row(batch, eng, tok, 1, head + [("<search> Mirela Dunst </search>", POL, 2)])
  m = batch.meta
  assert m.stop_reasons == ["answer", "max_turns"] and m.answers == ["Quillport", None]
  assert m.rows[0].extra["refine_texts"] == ["it flows to the Amber Sea",
                                             "Quillport is on the river"]
  assert [c[0] for c in ret.calls] == [["Tessaly River"] * 2, ["Amber Sea"] * 2]
  check_logprobs_and_history(batch, pol)
  # refine=False: Search-R1's prompt and <information> observations; no refine text recorded
  off = get_protocol("autorefine", max_turns=2, refine=False)
  batch, pol, ret, eng, tok = rollout(off, {0: [s1, last]})
  expect_row(batch, eng, tok, 0, [(s1, POL, 0), ("\n\n<information>", ENV, 0),
                                  (DOC_TESSALY, RET, 0), ("</information>\n\n", ENV, 0),
                                  (last, POL, 1)])
  assert eng.renderer.prompt_text(Q).startswith("<|im_start|>user\nAnswer the given question.")
  assert batch.meta.rows[0].extra["refine_texts"] == []


def test_rezero_stop_on_search_golden_and_chat_record():
  """The config's ReZero: `</search>` stops the turn (no end-of-turn token generated, so the
  whole framing is environment text); the final message's end-of-turn token is the policy's
  and trained on ([D]); information messages are user turns, never trained on."""
  proto = get_protocol("rezero", today="04 Apr 2025", stop_on_search=True)
  t0 = "<think> a </think> <search> Tessaly River </search>"
  t1 = "<think> based on it </think> <answer> Quillport </answer>" + EOS
  batch, pol, ret, eng, tok = rollout(proto, {0: [t0 + " trailing text", t1]})
  store = {i: (f'"{t}"\n{x}' if t else x) for i, t, x in h.PASSAGES}
  info = f"Result 1:\n{store['p4']}\n------\n"       # BM25 has one match for it
  expect_row(batch, eng, tok, 0, [
      (t0, POL, 0), ("<|im_end|>\n<|im_start|>user\n", ENV, 0), ("<information>", ENV, 0),
      (info, RET, 0), ("</information>", ENV, 0), ("<|im_end|>\n<|im_start|>assistant\n", ENV, 0),
      (t1, POL, 1)])
  assert batch.meta.rows[0].extra["messages"] == [
      {"role": "assistant", "content": t0},
      {"role": "user", "content": f"<information>{info}</information>"},
      {"role": "assistant", "content": t1[:-len(EOS)]}]
  assert "Today Date: 04 Apr 2025" in eng.renderer.prompt_text(Q)
  check_logprobs_and_history(batch, pol)
