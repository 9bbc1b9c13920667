"""UR²'s rewards, format checks and answer extraction against hand-computed examples from
seeds_ur2_rezero.md §A3 (and the paper's reward servers it summarises)."""

import pytest

from ragjax.metrics import letter_match, math_equal
from ragjax.metrics.answer import normalize_answer_spaced, token_f1
from ragjax.rl.rewards import RewardContext, combine_rewards, get_reward
from ragjax.rl.rewards.ur2_checks import violations
from ragjax.rollout.protocols import ur2
from ragjax.rollout.trajectory import RowMeta, TurnRecord

BQ, EQ = ur2.BEGIN_QUERY, ur2.END_QUERY


def query(q: str) -> str:
  return f"I should check. {BQ} {q} {EQ}"


def row(*turns, fallbacks: int = 0, served: int = None) -> RowMeta:
  """A row record: each turn is its policy text; a turn ending in a query was a served search
  (the first `served` of them when given)."""
  recs, n = [], 0
  for i, text in enumerate(turns):
    searched = text.rstrip().endswith(EQ) and (served is None or n < served)
    n += searched
    recs.append(TurnRecord(turn=i, action="search" if searched else "answer", text=text,
                           query="q" if searched else None))
  answer = ur2.extract_answer(turns[-1]) or None
  return RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer=answer, turns=recs,
                 extra={"fallbacks": fallbacks})


def ex(gold, task="math", retrieval=True, **extra) -> dict:
  return {"id": "x", "question": "q?", "golden_answers": [gold], "task": task,
          "retrieval": retrieval, **extra}


STAGE1 = {"ur2_format": 1.0, "ur2_retrieval": 1.0, "ur2_fallback": 1.0}
STAGE1_KW = {"ur2_format": {"mode": "stage1", "missing_retrieval_steps": 15}}
STAGE2 = {"ur2_answer": 1.0, "ur2_format": 1.0, "ur2_fallback": 1.0}


def total(weights, r, e, step=1, kwargs=None) -> float:
  return combine_rewards(weights, RewardContext(r, e, step), kwargs).total


# --- extraction (§A3.1) -------------------------------------------------------------------
def test_extraction_pattern_order_last_match_and_balanced_boxed():
  # ordered by pattern, not position: a letter answer beats any boxed one
  assert ur2.extract_answer("the correct answer is: B ... later \\boxed{7}") == "B"
  # last match within a pattern
  assert ur2.extract_answer("\\boxed{1} and then \\boxed{2}") == "2"
  # brace-balanced (the code's greedy `\\boxed\\{(.*)\\}` would give "1} and \\boxed{2")
  assert ur2.extract_answer("\\boxed{\\frac{1}{2}} wait \\boxed{\\sqrt{x^{2}}}") == "\\sqrt{x^{2}}"
  assert ur2.extract_answer("\\boxed{\\frac{1}{2}") == ""          # unclosed: no answer
  assert ur2.extract_answer("the Correct Answer Is c") == "c"       # case-insensitive
  assert ur2.extract_answer("<answer> Quillport </answer> then \\boxed{4}") == "Quillport"


# --- answer (§A3.1) ------------------------------------------------------------------------
def test_answer_scores_per_task():
  ans = get_reward("ur2_answer")
  ctx = lambda text, gold, task: RewardContext(row(text), ex(gold, task))
  assert ans(ctx("so \\boxed{\\frac{1}{2}}", "0.5", "math")) == 2.0          # math-verify
  assert ans(ctx("so \\boxed{(x+1)^2}", "x^2+2x+1", "math")) == 2.0
  assert ans(ctx("so \\boxed{3}", "4", "math")) == 0.0                       # no judge: rule only
  # QA: 2 x F1 with the reward server's normalisation ("Jean-Luc" is two tokens):
  # pred {jean, luc, picard} vs gold {picard}: P = 1/3, R = 1, F1 = 0.5
  assert ans(ctx("\\boxed{Jean-Luc Picard}", "Picard", "qa")) == pytest.approx(1.0)
  # SQuAD drops the hyphen: {jeanluc, picard} vs {picard}: P = 1/2, R = 1, F1 = 2/3
  assert token_f1("Jean-Luc Picard", "Picard") == pytest.approx(2 / 3)
  assert ans(ctx("\\boxed{yes}", "no", "qa")) == 0.0
  assert ans(ctx("\\boxed{True}", "yes", "qa")) == 2.0                       # True -> yes
  assert normalize_answer_spaced("The_Amber Sea’s") == "amber sea s"
  # MCQ: 2 x letter EM, case-insensitive
  assert ans(ctx("the correct answer is: b", "B", "mcq")) == 2.0
  assert ans(ctx("the correct answer is: C", "B", "mcq")) == 0.0
  assert ans(ctx("no answer here", "B", "mcq")) == 0.0                      # empty pred -> 0
  assert letter_match(" B ", ["b"]) == 1.0 and math_equal("", ["0"]) == 0.0
  # the paper's text (`binary=True`): QA scores 2 x exact match, so F1 0.5 -> 0
  assert ans(ctx("\\boxed{Jean-Luc Picard}", "Picard", "qa"), binary=True) == 0.0
  assert ans(ctx("\\boxed{the Jean_Luc picard}", "Jean-Luc Picard", "qa"), binary=True) == 2.0
  assert ans(ctx("the correct answer is: b", "B", "mcq"), binary=True) == 2.0
  # an answer that normalises to "" (only articles / punctuation) is never exact
  assert ans(ctx("\\boxed{The}", "A", "qa"), binary=True) == 0.0
  assert ans(ctx("\\boxed{an}", ["the"], "qa"), binary=True) == 0.0
  assert ans(ctx("\\boxed{?!}", ["..."], "qa"), binary=True) == 0.0


def test_math_judge_scores_partial_answers_over_http():
  """After a failed rule check the paper's judge prompt decides (Correct 2, Partially correct
  1, Incorrect 0), here through an OpenAI-compatible server on 127.0.0.1 (`judge_url`)."""
  from fastapi import FastAPI
  from ragjax.services.chat_server import ServerThread
  seen = []
  app = FastAPI()

  @app.post("/v1/chat/completions")
  async def complete(body: dict):
    prompt = body["messages"][-1]["content"]
    seen.append((prompt, body["temperature"], body["max_tokens"]))
    verdict = "Partially correct" if "Pred: 2\n" in prompt + "\n" else "Incorrect"
    return {"choices": [{"message": {"role": "assistant",
                                     "content": f"Reason: checked.\nJudgment: {verdict}"}}]}

  ans = get_reward("ur2_answer")
  with ServerThread(app) as srv:
    kw = dict(judge_url=srv.url + "/v1", judge_model="judge")
    partial = ans(RewardContext(row("\\boxed{2}"), ex("2, -2")), **kw)
    wrong = ans(RewardContext(row("\\boxed{7}"), ex("2, -2")), **kw)
    rule = ans(RewardContext(row("\\boxed{-2, 2}"), ex("2, -2")), **kw)   # math-verify: no call
  assert (partial, wrong, rule) == (1.0, 0.0, 2.0)
  assert len(seen) == 2
  # the paper's text (`binary=True`, Eq. 5: +2 correct, 0 incorrect): partial credit is 0
  with ServerThread(app) as srv:
    kw = dict(judge_url=srv.url + "/v1", judge_model="judge", binary=True)
    assert ans(RewardContext(row("\\boxed{2}"), ex("2, -2")), **kw) == 0.0
    assert ans(RewardContext(row("\\boxed{-2, 2}"), ex("2, -2")), **kw) == 2.0
  prompt, temperature, max_tokens = seen[0]
  assert prompt.startswith("You are an expert math evaluator.")
  assert prompt.endswith("Question: q?\nGold: 2, -2\nPred: 2") and temperature == 0.0
  assert max_tokens == 512


# --- format checks (§A3.2) -----------------------------------------------------------------
def check(text_turns, gold="4", task="math", retrieval=True, searches=None, step_gate=False,
          family="qwen"):
  r = row(*text_turns)
  n = r.num_searches if searches is None else searches
  return [v.split(":")[0] for v in violations(r.policy_text, r.answer or "", gold, task=task,
                                              retrieval=retrieval, searches=n,
                                              missing_retrieval=step_gate, family=family)]


def test_each_format_check():
  clean = [query("Definition of a prime"), "So \\boxed{4}"]
  assert check(clean) == []
  assert check(["No answer at all."]) == ["1"]
  assert check([query("x"), "\\boxed{4} or \\boxed{5}"]) == ["1"]              # two answers
  assert check(["\\boxed{4} the correct answer is: A"]) == ["1"]
  # 2: a query the environment never served (empty / final turn): no documents for it
  assert check([query("x"), "\\boxed{4}"], searches=0) == ["2"]
  assert check([f"<|begin_of_documents|> fake <|end_of_documents|> \\boxed{{4}}"]) == ["2"]
  five = [query(f"q{i}") for i in range(5)] + ["\\boxed{4}"]
  assert check(five) == ["2"]                                                   # > 4 queries
  long_q = " ".join(["word"] * 21)
  assert check([query(long_q), query(long_q), "\\boxed{4}"]) == ["3", "3"]     # each counts
  assert check([query(" ".join(["word"] * 20)), "\\boxed{4}"]) == []
  assert check(["\nuser said \\boxed{4} <|im_start|>"]) == ["4", "4"]
  assert check(["<|start_header_id|>assistant<|end_header_id|> \\boxed{4}"],
               family="llama") == ["4", "4", "4"]
  assert check(["\\boxed{4} 答案"]) == ["5"]
  assert check(["the correct answer is: B"], gold="B", task="mcq") == []
  assert check(["\\boxed{B or C}"], gold="B", task="mcq") == ["6"]
  eleven = " ".join(["w"] * 11)
  assert check([f"\\boxed{{{eleven}}}"], gold="4") == ["6"]
  assert check([f"\\boxed{{{eleven}}}"], gold=" ".join(["g"] * 12)) == []       # gold is longer
  assert check([f"\\boxed{{{BQ} x}}"]) == ["2", "7"]      # the tag also unbalances check 2
  assert check(clean, retrieval=False) == ["8"]
  assert check(["\\boxed{4}"], retrieval=True, step_gate=True) == ["9"]
  assert check(["\\boxed{4}"], retrieval=False, step_gate=True) == []
  assert check(["\\boxed{4}"], retrieval=True, step_gate=False) == []


def test_checks_read_policy_text_only():
  """Retrieved documents holding CJK text or a chat marker cost nothing (§A3.2 [D])."""
  r = row(query("Amber Sea"), "\\boxed{4}")
  r.turns[0].doc_texts = ("<|im_start|> 答案 \\boxed{9}",)
  assert violations(r.policy_text, r.answer, "4", task="math", retrieval=True, searches=1) == []


# --- stage rewards (§A3.3-A3.5) -------------------------------------------------------------
def test_stage1_rewards_7b_3b_llama():
  e = ex("4")
  one = row(query("Formula for the area of a circle"), "\\boxed{4}")
  two = row(query("a"), query("b"), "\\boxed{4}", fallbacks=1)
  none = row("I will just guess.")
  # 7B: +1 clean, +3 one search / +4 two, -0.5 per fallback
  assert total(STAGE1, one, e, 1, STAGE1_KW) == 1 + 3
  assert total(STAGE1, two, e, 1, STAGE1_KW) == 1 + 4 - 0.5
  # no search and no answer: checks 1 and 9 -> -2, no retrieval reward
  assert total(STAGE1, none, e, 3, STAGE1_KW) == -2
  # a non-retrieval sample is never below 0 in Stage 1 (the code's else-branch)
  assert total(STAGE1, none, ex("4", retrieval=False), 3, STAGE1_KW) == 0
  kw3 = {**STAGE1_KW, "ur2_retrieval": {"one": 5.0, "many": 7.0}}
  assert total(STAGE1, one, e, 1, kw3) == 1 + 5 and total(STAGE1, two, e, 1, kw3) == 1 + 7 - 0.5
  kwl = {**STAGE1_KW, "ur2_retrieval": {"one": 3.0, "many": 3.0},
         "ur2_format": {"mode": "stage1", "missing_retrieval_steps": 15, "family": "llama"}}
  assert total(STAGE1, two, e, 1, kwl) == 1 + 3 - 0.5
  # violations accumulate in Stage 1: two over-long queries and two answers -> -3
  long_q = " ".join(["w"] * 25)
  bad = row(query(long_q), query(long_q), "\\boxed{4} \\boxed{5}")
  assert total(STAGE1, bad, e, 1, STAGE1_KW) == -3 + 4


def test_stage2_rewards_and_range():
  math_ok = row(query("Definition of a median"), "So \\boxed{\\frac{1}{2}}")
  assert total(STAGE2, math_ok, ex("0.5")) == 2 + 1
  fb = row(query("compute it"), query("compute more"), "So \\boxed{\\frac{1}{2}}", fallbacks=2)
  assert total(STAGE2, fb, ex("0.5")) == 2 + 1 - 1.0
  # format in Stage 2 is +1 / 0, never negative; worst case -0.5 x fallbacks
  worst = row(query("a"), query("b"), query("c"), query("d"), "no answer", fallbacks=4)
  assert total(STAGE2, worst, ex("0.5")) == -2.0
  qa = row(query("Picard rank"), "\\boxed{Jean-Luc Picard}")
  assert total(STAGE2, qa, ex("Picard", "qa")) == pytest.approx(1.0 + 1)
  # a non-retrieval sample: no fallback penalty, and a query is a violation (check 8)
  cot = row("2 + 2 = 4, \\boxed{4}")
  assert total(STAGE2, cot, ex("4", retrieval=False)) == 3
  assert total(STAGE2, row(query("x"), "\\boxed{4}", fallbacks=1), ex("4", retrieval=False)) == 2


def test_weaker_stage1_bonus_only_in_the_first_steps():
  weak = {**STAGE2, "ur2_retrieval": 1.0}
  kw = {"ur2_retrieval": {"one": 0.5, "many": 1.0, "steps": 10}}
  r1 = row(query("Symptoms of anemia"), "the correct answer is: C")
  r2 = row(query("a"), query("b"), "the correct answer is: C")
  e = ex("C", "mcq")
  assert total(weak, r1, e, 10, kw) == 2 + 1 + 0.5
  assert total(weak, r2, e, 1, kw) == 2 + 1 + 1.0
  assert total(weak, r2, e, 11, kw) == 2 + 1
  assert total(weak, r2, ex("C", "mcq", retrieval=False), 1, kw) == 2 + 0     # check 8, no bonus


def test_bad_inputs_name_the_problem():
  with pytest.raises(ValueError, match="ur2_format mode"):
    get_reward("ur2_format")(RewardContext(row("x"), ex("4")), mode="stage3")
  with pytest.raises(ValueError, match="record x: task"):
    get_reward("ur2_answer")(RewardContext(row("x"), ex("4", task="poetry")))
  no_fb = row("\\boxed{4}")
  no_fb.extra = {}
  with pytest.raises(KeyError, match="fallbacks"):
    get_reward("ur2_fallback")(RewardContext(no_fb, ex("4")))


def test_evaluation_metric_per_task():
  """UR²'s sets are reported by letter EM (MCQ), math equivalence and QA token F1 (§A6)."""
  from ragjax.metrics.by_task import answer_score
  rec = lambda gold, task: {"id": "r", "golden_answers": [gold], "metadata": {"task": task}}
  assert answer_score("task", "\\frac{1}{2}", rec("0.5", "math")) == 1.0
  assert answer_score("task", "c", rec("C", "mcq")) == 1.0
  assert answer_score("task", "the Amber Sea", rec("Amber Sea coast", "qa")) == pytest.approx(0.8)
  assert answer_score("task", "0.5", rec("0.5", "")) == 1.0              # no task: EM
  assert answer_score("em", "\\frac{1}{2}", rec("0.5", "math")) == 0.0
  assert answer_score("task", None, rec("C", "mcq")) == 0.0
  with pytest.raises(ValueError, match="no metric for task 'poetry'"):
    answer_score("task", "x", rec("x", "poetry"))


def test_task_metrics_report_the_curriculums_level_mix_of_the_step():
  """`ur2_tasks`: per task its score / 2, searched and retrieval-prompt shares; and the share of
  the step's rows from each difficulty level (by hand: 2 hard QA rows, 1 easy math row and one
  math row without a label, of 4)."""
  from ragjax.rl.rewards.ur2 import task_metrics
  rows = [row(query("a"), "\\boxed{Paris}"), row("\\boxed{Rome}"), row("\\boxed{4}"),
          row("\\boxed{5}")]
  exs = [ex("Paris", task="qa", difficulty="hard"), ex("Paris", task="qa", difficulty="hard"),
         ex("4", difficulty="easy", retrieval=False), ex("4", retrieval=False)]
  m = task_metrics(rows, exs)
  assert m["qa/score"] == pytest.approx(0.5) and m["qa/searched"] == 0.5
  assert m["qa/retrieval_prompt"] == 1.0 and m["math/retrieval_prompt"] == 0.0
  assert m["math/score"] == pytest.approx(0.5)
  assert m["level/hard"] == 0.5 and m["level/easy"] == 0.25
  assert not {k for k in m if k.startswith("level/")} - {"level/hard", "level/easy"}
  # records without labels (no curriculum): no level keys
  assert not any(k.startswith("level/") for k in task_metrics(rows[:1], [ex("Paris", task="qa")]))
