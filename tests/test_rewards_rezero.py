"""ReZero's six reward functions against values worked out by hand from seeds_ur2_rezero.md
§B3, including the code quirks the spec lists, and the protocol's chat record they read."""

import pytest

from ragjax.rl.rewards import RewardContext, get_reward, score_rows
from ragjax.rl.rewards import rezero as z
from ragjax.rollout.protocols import get_protocol
from ragjax.rollout.trajectory import RowMeta, TurnRecord

A = lambda text: {"role": "assistant", "content": text}          # noqa: E731
U = lambda text: {"role": "user", "content": f"<information>{text}</information>"}  # noqa
EXAMPLE = {"id": "apollo-1", "question": "When did Apollo 13 launch?",
           "golden_answers": ["April 11, 1970"], "supporting_ids": ["c7"],
           "metadata": {"chunk_content": "Apollo 13 launched on April 11, 1970."}}
WEIGHTS = {"rezero_correctness": 4.0, "rezero_format": 2.0, "rezero_retry": 1.0,
           "rezero_em_chunk": 1.0, "rezero_strategy": 1.0, "rezero_diversity": 1.0}


class ScriptedJudge:
  """A `ChatModel` test double: replies "Yes" when the student's answer contains the gold
  answer, and records every batch it is asked."""

  def __init__(self):
    self.batches = []

  def complete(self, messages_list, max_tokens=256, temperature=0.0, stop=None, top_p=1.0,
               seed=None):
    self.batches.append((messages_list, max_tokens, temperature, top_p))
    out = []
    for msgs in messages_list:
      text = msgs[-1]["content"]
      gold = text.split("Correct Answer: ")[1].split("\n")[0]
      student = text.split("Student Answer: ")[1].split("\n\nYour response")[0]
      out.append("Yes." if gold.lower() in student.lower() else "No, it is not.")
    return out


def ctx(msgs, example=EXAMPLE, services=None, doc_ids=()):
  turns = [TurnRecord(0, "search", "", doc_ids=tuple(d)) for d in doc_ids]
  r = RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, turns=turns,
              extra={"messages": list(msgs)})
  return RewardContext(r, example, 0, services or {})


def value(name, msgs, **kw):
  return get_reward(name)(ctx(msgs), **kw)


GOOD = [A("<think>I need the launch date</think><search>apollo 13 launch</search>"),
        U("Result 1:\nApollo 13 launched on April 11, 1970.\n------\n"),
        A("<think>based on the results it launched then</think><answer>April 11, 1970</answer>")]


# ---- 1. correctness ----------------------------------------------------------------------
def test_correctness_checks_a_to_d_and_one_judge_call_per_batch():
  judge = ScriptedJudge()
  s = {"judge": judge}
  cases = [
      (GOOD, 1.0),
      (GOOD[:2], 0.0),                                               # (a) last is the user's
      (GOOD[:2] + [A("<think>x</think> April 11, 1970")], 0.0),      # (b) no answer block
      (GOOD[:2] + [A("<search>q</search><answer>April 11, 1970</answer>")], 0.0),  # (c)
      (GOOD[:2] + [A("<answer>April 11, 1970</answer><information>x</information>")], 0.0),
      (GOOD[:2] + [A("<think>hmm</think><answer>in May</answer>")], 0.0),  # (d) judge: no
  ]
  res = score_rows({"rezero_correctness": 4.0}, [ctx(m, services=s) for m, _ in cases])
  assert [r.total for r in res] == [4.0 * v for _, v in cases]
  assert len(judge.batches) == 1 and len(judge.batches[0][0]) == 2   # only (a)-(c) passers
  msgs, max_tokens, temperature, top_p = judge.batches[0]
  # the ReZero judge prompt, at the code's sampling settings; [D]: only the <answer> content
  assert (temperature, top_p) == (0.1, 0.95)
  assert "Question: When did Apollo 13 launch?\nCorrect Answer: April 11, 1970\n" \
         "Student Answer: April 11, 1970\n" in msgs[0][0]["content"]
  # the code's lenient parse: any "yes" counts; judge_input="message" sends the whole message
  whole = get_reward("rezero_correctness")(ctx(GOOD, services=s), judge_input="message")
  assert whole == 1.0 and "<think>based on" in judge.batches[-1][0][0][0]["content"]


def test_correctness_without_a_judge_service_names_the_config_section():
  with pytest.raises(ValueError, match="needs the 'judge' service.*judge"):
    score_rows({"rezero_correctness": 1.0}, [ctx(GOOD)])


# ---- 2. format ---------------------------------------------------------------------------
@pytest.mark.parametrize("last,ok", [
    ("<think>x</think> <answer>y</answer>", 1),
    ("<think>x</think>\n<search>q</search>\n", 1),                  # a search turn is fine
    ("**<think>**x</think><answer>y</answer>", 0),                  # bold-wrapped tag
    ("<think>x</think> _<answer>_ y</answer>", 0),                  # italic-wrapped tag
    ("<think>x</think><info>z</info><answer>y</answer>", 0),        # info-like tag
    ("<think>x</think><Information>z</Information><answer>y</answer>", 0),
    ("<answer>y</answer>", 0),                                      # no think
    ("<think>x</think><answer>a</answer><answer>b</answer>", 0),    # two answers
    ("<think>x</think><search>q</search><answer>y</answer>", 0),    # both
    ("<think>a</think><answer>y</answer><think>b</think>", 0),      # think after the answer
    ("<think>x</think><answer>y</answer> done", 0),                 # does not end in a tag
])
def test_format_by_hand(last, ok):
  assert value("rezero_format", [A("<think>x</think><search>q</search>"), U("r"), A(last)]) == ok


def test_format_checks_only_the_last_assistant_message():
  assert value("rezero_format", [A("**<think>** garbage"), U("r"),
                                 A("<think>x</think><answer>y</answer>")]) == 1.0


# ---- 3. retry ----------------------------------------------------------------------------
def test_retry_by_hand_including_quirks():
  s = lambda q: A(f"<think>t</think><search>{q}</search>")       # noqa: E731
  ans = A("<think>t</think><answer>wrong on purpose</answer>")
  # n = 1: 0.2 + 0.15 = 0.35 (the code pays for the first search); after_first: 0
  assert value("rezero_retry", [s(1), U("r"), ans]) == 0.35
  assert value("rezero_retry", [s(1), U("r"), ans], retry_counting="after_first") == 0.0
  # n = 3: 0.65; after_first counts 2: 0.5 — and correctness is not required (quirk)
  three = [s(1), U("r"), s(2), U("r"), s(3), U("r"), ans]
  assert value("rezero_retry", three) == 0.65
  assert value("rezero_retry", three, retry_counting="after_first") == 0.5
  # n = 7 is capped at 5: 0.95
  assert value("rezero_retry", [m for i in range(7) for m in (s(i), U("r"))] + [ans]) == 0.95
  # one message with two searches: n = 3 -> 0.65, halved -> 0.325
  two = A("<think>t</think><search>a</search><search>b</search>")
  assert value("rezero_retry", [two, U("r"), s(3), U("r"), ans]) == 0.325
  # no answer in the last assistant message: 0 however many searches
  assert value("rezero_retry", [s(1), U("r"), s(2), U("r")]) == 0.0
  assert value("rezero_retry", [ans]) == 0.0                      # answered without searching
  with pytest.raises(ValueError, match="retry_counting"):
    value("rezero_retry", [ans], retry_counting="every")


# ---- 4. em_chunk -------------------------------------------------------------------------
def test_em_chunk_substring_of_an_information_message_or_shown_by_id():
  assert value("rezero_em_chunk", GOOD) == 1.0
  assert value("rezero_em_chunk", [GOOD[0], U("Apollo 13 launched on April 11"), GOOD[2]]) == 0.0
  # the chunk written by the model itself does not count: only information messages
  assert value("rezero_em_chunk", [A("Apollo 13 launched on April 11, 1970.")]) == 0.0
  head = {**EXAMPLE, "metadata": {"supporting_paragraphs": ["x", "launched on April 11"]}}
  assert get_reward("rezero_em_chunk")(ctx(GOOD, head)) == 1.0   # HEAD: the last paragraph
  by_id = {k: v for k, v in EXAMPLE.items() if k != "metadata"}
  assert get_reward("rezero_em_chunk")(ctx(GOOD, by_id, doc_ids=[("c3", "c7")])) == 1.0
  assert get_reward("rezero_em_chunk")(ctx(GOOD, by_id, doc_ids=[("c3",)])) == 0.0
  with pytest.raises(KeyError, match="names no gold chunk"):
    get_reward("rezero_em_chunk")(ctx(GOOD, {"id": "q", "golden_answers": ["a"]}))


# ---- 5. strategy -------------------------------------------------------------------------
def test_strategy_by_hand_and_the_never_reset_flag():
  # think+search (0.2); after the information: no think+search, so min(0, 1) refinements (0);
  # an answer with "based" in its think (0.4)
  assert value("rezero_strategy", GOOD) == pytest.approx(0.6)
  refine = [GOOD[0], GOOD[1], A("<think>the results show nothing</think><search>liftoff</search>"),
            U("Result 1:\nliftoff\n------\n"), A("<think>found it</think><answer>x</answer>")]
  # 0.2 + min(0.4, 0.2 * min(1 think+search, 2 keyword thinks)) + 0.4 = 0.8
  assert value("rezero_strategy", refine) == pytest.approx(0.8)
  # the flag is set once and never reset: two refinements after one information message
  twice = [GOOD[0], GOOD[1], A("<think>according to it</think><search>a</search>"),
           A("<think>found more</think><search>b</search>"), A("<answer>x</answer>")]
  assert value("rezero_strategy", twice) == pytest.approx(0.2 + 0.4)
  # retrieved text with '<' or '>' is not information: nothing after it counts
  brackets = [GOOD[0], U("a < b"), A("<think>according to it</think><search>a</search>"),
              A("<think>found</think><answer>x</answer>")]
  assert value("rezero_strategy", brackets) == pytest.approx(0.2 + 0.0 + 0.4)
  assert value("rezero_strategy", [A("<answer>x</answer>")]) == 0.0


# ---- 6. diversity ------------------------------------------------------------------------
def test_diversity_by_hand():
  q = lambda *qs: [A(f"<think>t</think><search>{x}</search>") for x in qs]  # noqa: E731
  assert value("rezero_diversity", [A("<answer>x</answer>")]) == 0.0
  assert value("rezero_diversity", q("apollo 13 launch")) == 0.2
  # identical: similarity 1 (not a near-duplicate, a duplicate): 0.2 + 0 - 0.2 = 0
  assert value("rezero_diversity", q("Apollo 13 tank", "apollo 13 tank!")) == 0.0
  # disjoint: diversity 1, 2 unique: 0.4 + 0.4 = 0.8
  assert value("rezero_diversity", q("abc", "xyz")) == pytest.approx(0.8)
  # "apollo 13 tank" vs "apollo 13 tanks": ratio 2*14/29 in (0.8, 1): near-duplicate
  # 0.4 + 0.4 * (1 - 28/29) - 0.1
  assert value("rezero_diversity", q("apollo 13 tank", "apollo 13 tanks")) == pytest.approx(
      0.4 + 0.4 / 29 - 0.1)
  # operators: bases "" and "apollo crew" (ratio 0), operator lists differ by 2 -> x0.6 = 0;
  # 0.4 + 0.4 + min(0.15, 0.05*2) + 0.05 * 1/2 = 0.925
  assert value("rezero_diversity", q('site:nasa.gov "oxygen tank"', "apollo crew")) == \
      pytest.approx(0.925)
  assert z.split_query('Apollo -moon OR mission, "crew list" filetype:pdf') == (
      "apollo mission", ("-moon", "OR", '"crew list"', "filetype:pdf"))


def test_the_six_rewards_with_the_code_weights():
  judge = ScriptedJudge()
  res = score_rows(WEIGHTS, [ctx(GOOD, services={"judge": judge})])[0]
  # correctness 1, format 1, retry 0.35, em_chunk 1, strategy 0.6, diversity 0.2
  assert res.components == pytest.approx({
      "rezero_correctness": 1.0, "rezero_format": 1.0, "rezero_retry": 0.35,
      "rezero_em_chunk": 1.0, "rezero_strategy": 0.6, "rezero_diversity": 0.2})
  assert res.total == pytest.approx(4 + 2 + 0.35 + 1 + 0.6 + 0.2)


def test_protocol_records_the_chat_the_rewards_read():
  proto = get_protocol("rezero", today="04 Apr 2025")
  turns = [TurnRecord(0, "search", "<think>a</think><search>q1</search>", query="q1",
                      doc_texts=('"T"\nfirst',)),
           TurnRecord(1, "search", "<search>q2</search>", query="q2", doc_texts=("second",)),
           TurnRecord(2, "answer", "<answer>x</answer>")]
  r = RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, turns=turns, stop_reason="answer")
  assert proto.annotate(r)["messages"] == [
      A("<think>a</think><search>q1</search>"), U('Result 1:\n"T"\nfirst\n------\n'),
      A("<search>q2</search>"), U("Result 1:\nsecond\n------\n"), A("<answer>x</answer>")]
  # a search that ran out of budget was never shown: no information message after it
  r.turns, r.stop_reason = turns[:2], "budget"
  assert [m["role"] for m in proto.annotate(r)["messages"]] == ["assistant", "user", "assistant"]


class CountingJudge(ScriptedJudge):
  """A judge that counts prompt tokens like `LocalChatModel` (`encode`, `max_prompt_tokens`)."""

  def __init__(self, tok, max_prompt_tokens):
    super().__init__()
    self.tok, self.max_prompt_tokens = tok, max_prompt_tokens

  def encode(self, messages):
    return self.tok("\n\n".join(m["content"] for m in messages))["input_ids"]


def test_judge_room_is_checked_before_training():
  import os
  import sys
  sys.path.insert(0, os.path.dirname(__file__))
  import _rollout_helpers as h
  tok = h.tokenizer(False)
  long_q = dict(EXAMPLE, question="Which " + "very " * 60 + "long question?")
  from ragjax.services.templates import get_template
  fixed = len(CountingJudge(tok, 0).encode(get_template("rezero_correctness").render(
      question=long_q["question"], answer="April 11, 1970", student_answer="")))
  # Room for the template with the longest question, a 32-token turn and 8 spare: accepted.
  z.check_judge_room(CountingJudge(tok, fixed + 40), [EXAMPLE, long_q], 32)
  with pytest.raises(ValueError) as e:                 # one token short
    z.check_judge_room(CountingJudge(tok, fixed + 39), [EXAMPLE, long_q], 32)
  msg = str(e.value)
  assert f"judge.max_prompt_tokens={fixed + 39}" in msg and "sampler.max_new_tokens=32" in msg
  assert f"reach {fixed + 40}" in msg
  # A judge without a token count (a remote endpoint) keeps its own limit.
  z.check_judge_room(ScriptedJudge(), [long_q], 10_000)


def test_the_two_readings_and_their_baselines_score_a_retry_trajectory_by_hand():
  """configs/rezero.py's pair of readings on one trajectory that searched twice and answered
  right: the run behind Figure 2 (six functions, weights [4, 2, 1, 1, 1, 1], every search paid:
  n = 2 -> 0.2 + 0.15 x 2 = 0.50) and the paper's text (four functions, searches after the
  first: n = 1 -> 0.35); each baseline is the same with rezero_retry at 0 (one field)."""
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs"))
  import rezero as cfg
  from ragjax.rl.run_config import parse_run_config
  msgs = [A("<think>I need the launch date</think><search>apollo 13 crew</search>"),
          U("Result 1:\nThe crew was Lovell.\n------\n"),
          A("<think>based on the results not yet</think><search>apollo 13 launch</search>"),
          U("Result 1:\nApollo 13 launched on April 11, 1970.\n------\n"),
          A("<think>based on the results it launched then</think><answer>April 11, 1970</answer>")]
  # strategy: 0.2 (think+search) + min(0.4, 0.2 x 2 refinements) ... = 0.2 + 0.2 + 0.4 = 0.8;
  # diversity of two different queries (below); format 1, correctness 1, em_chunk 1
  div = z.diversity_value(["apollo 13 crew", "apollo 13 launch"])
  totals = {}
  for arg in ("llama-3.2-3b-instruct", "llama-3.2-3b-instruct-paper"):
    for baseline in (False, True):
      c = cfg.get_config(arg)
      if baseline:
        c.rl.rewards.rezero_retry = 0.0
      run = parse_run_config(c)
      res = score_rows(run.rl.rewards, [ctx(msgs, services={"judge": ScriptedJudge()})],
                       {k: dict(v) for k, v in run.rl.reward_kwargs.items()})[0]
      totals[arg, baseline] = res.total
  assert z.strategy_value(msgs) == pytest.approx(0.8)
  assert totals["llama-3.2-3b-instruct", False] == pytest.approx(4 + 2 + 0.5 + 1 + 0.8 + div)
  assert totals["llama-3.2-3b-instruct", True] == pytest.approx(4 + 2 + 1 + 0.8 + div)
  assert totals["llama-3.2-3b-instruct-paper", False] == pytest.approx(4 + 2 + 0.35 + 1)
  assert totals["llama-3.2-3b-instruct-paper", True] == pytest.approx(4 + 2 + 1)
  code, paper = cfg.get_config("llama-3.2-3b-instruct"), cfg.get_config(
      "llama-3.2-3b-instruct-paper")
  assert len(code.rl.rewards) == 6 and len(paper.rl.rewards) == 4
  assert code.retriever.noise.kind == "" and (paper.retriever.noise.kind,
                                              paper.retriever.noise.p) == ("shuffle", 0.3)
