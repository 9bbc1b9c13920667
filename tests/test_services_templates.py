"""Judge / summariser / teacher templates rendered against golden strings from the specs, and
their parsers on well-formed and malformed replies."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED
from test_services_fixtures import ScriptedChat
from ragjax.rollout.protocols import ur2 as ur2_protocol
from ragjax.services import templates as T
from ragjax.services.judge import TemplateJudge

RESEARCH = os.path.abspath(os.path.join(SHARED, "research"))
UR2_SPEC = os.path.join(RESEARCH, "seeds_ur2_rezero.md")
R3_SPEC = os.path.join(RESEARCH, "seeds_rex_autorefine_r3.md")
needs_specs = pytest.mark.skipif(not (os.path.exists(UR2_SPEC) and os.path.exists(R3_SPEC)),
                                 reason="../shared/research specs not present")


def spec_block(path: str, marker: str, fence: str) -> str:
  """The fenced block after the first line containing `marker`, de-indented by its fence."""
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  i = next(k for k, line in enumerate(lines) if marker in line)
  j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == fence)
  ind = len(lines[j]) - len(lines[j].lstrip())
  end = next(k for k in range(j + 1, len(lines))
             if lines[k].strip() == fence and len(lines[k]) - len(lines[k].lstrip()) == ind)
  return "\n".join(line[ind:] if line.startswith(" " * ind) else line.lstrip()
                   for line in lines[j + 1:end])


def sub(text: str, **values) -> str:
  for k, v in values.items():
    text = text.replace("{" + k + "}", v)
  return text


def user(msgs):
  return msgs[-1]["content"]


# ---- golden renders (literal strings from the specs, no spec file needed) ----
def test_short_templates_render_to_golden_strings():
  msgs = T.render_rezero_correctness("Who founded the observatory?", "Mirela Dunst",
                                     "<think>hm</think><answer>Mirela Dunst</answer>")
  assert msgs == [{"role": "user", "content": (
      "You are grading a student's answer to a question. For the following question, compare "
      "the student's answer to the correct answer. Reply with 'Yes' if the student's answer "
      "contains the correct information, even if it's not an exact match. If the student's "
      "answer doesn't contain the right information or is completely incorrect, reply with "
      "'No'.\n\nQuestion: Who founded the observatory?\nCorrect Answer: Mirela Dunst\nStudent "
      "Answer: <think>hm</think><answer>Mirela Dunst</answer>\n\nYour response should be just "
      "'Yes' or 'No'.")}]
  msgs = T.render_ur2_math_judge("What is 1/2 + 1/3?", "\\frac{5}{6}", "5/6")
  assert msgs == [{"role": "user", "content": (
      "You are an expert math evaluator.\nGiven a question, a gold answer and a predicted answer, "
      "judge if they are mathematically consistent.\n\nIgnore formatting (e.g., \\text{}, "
      "spacing, capitalization).\nAccept equivalent expressions (e.g., factored vs expanded "
      "form).\nIf the prediction matches only part of a multi-part answer (e.g. one of several "
      "intervals or roots), label it as Partially correct.\n\nOutput format:\nReason: Brief "
      "explanation\nJudgment: Correct / Partially correct / Incorrect\n\nInput:\nQuestion: What "
      "is 1/2 + 1/3?\nGold: \\frac{5}{6}\nPred: 5/6")}]
  msgs = T.render_r3_relevance("The question: Who founded it?", "I need the founder.",
                               "founder of the observatory", ["Doc A " * 100, "Doc B"])
  docs = ("Doc A " * 100 + "\nDoc B")[:512]
  assert msgs == [
      {"role": "system", "content": "You are a professional evaluator. Analyze step quality "
                                    "rigorously."},
      {"role": "user", "content": (
          "Evaluate the current step based on the following criteria (0.0-1.0 scale):\n\n"
          "[Problem]\nThe question: Who founded it?\n\n[Current Analysis]\nI need the founder."
          "\n\n[Search Query]\nfounder of the observatory\n\n[Retrieved Documents]\n" + docs +
          "\n\nEvaluation Criteria:\n1. Relevance:\n   - Match between search results and query "
          "intent. \n   - Usefulness for problem solving (information completeness, accuracy)\n"
          "4. If ANY of these fatal errors occur:\n    - Contradicts previous steps\n    - "
          "Contains illogical reasoning\n   Return 0.0 for ALL dimensions.\n\n\nOutput MUST "
          "follow EXACTLY this format(Scores range from 0.0 to 1.0 and the passing score is "
          "0.6):\nRelevance: x.xx\nEvaluation:\n- Relevance: [brief explanation]")}]
  assert len(docs) == 512
  assert "[Retrieved Documents]\nNo results found\n\n" in user(T.render_r3_relevance("p", "a", "q",
                                                                                        []))
  msgs = T.render_r3_answer("The question: Who?", "Dunst", ["Mirela Dunst", "M. Dunst"])
  assert msgs[0] == {"role": "system", "content": "You are a helpful assistant."}
  assert user(msgs).startswith("Please perform a correctness analysis based on the following "
                               "criteria:\n1. Existence of an Answer:")
  assert user(msgs).endswith(
      "Now, given the following input, provide the corresponding output:\nModel Input:\n"
      "Question: The question: Who?\nGiven Answer: Dunst\nStandard Answer List:\n"
      "- Mirela Dunst\n\n- M. Dunst\n\nModel Output:")
  steps = [{"analysis": "Need founder.", "query": "observatory founder", "documents": "Doc 1"},
           {"analysis": "Need year.", "query": "founding year", "documents": "Doc 2"}]
  nxt = user(T.render_r3_teacher("Who founded it?", steps))
  assert nxt.startswith("# Role\nYou are an expert in LLMs and RAG, with extensive expertise in "
                        "decomposition.\n# Answer Format:\n")
  assert nxt.endswith(
      "#### Current Input:\nThe question: Who founded it?. The Previous Steps:Step 1:\nThe "
      "problem analysis: Need founder.\nThe retrieval query: observatory founder\nThe retrieval "
      "documents: Doc 1\n\nStep 2:\nThe problem analysis: Need year.\nThe retrieval query: "
      "founding year\nThe retrieval documents: Doc 2\n#### Output:")
  assert user(T.render_r3_teacher("Q?")).endswith("#### Current Input:\nThe question: Q?\n"
                                                   "#### Output:")
  content = T.ur2_wikipedia_content(['"Quillport"\nA harbour city.', "Second passage."])
  assert content == 'Wikipedia Content 1: "Quillport"\nA harbour city.\n\nWikipedia Content 2: ' \
                    'Second passage.'
  for task, mode in (("qa", "strong"), ("math", "strong"), ("qa", "weak"), ("math", "weak")):
    text = user(T.render_ur2_summary("Step one.", "capital of Zorbland", ["P1", "P2"], task, mode))
    assert "- **Previous Reasoning Steps:**  \nStep one.\n\n- **Current Search Query:**  \n" \
        "capital of Zorbland\n\n- **Wikipedia Content:**  \nWikipedia Content 1: P1\n\n" \
        "Wikipedia Content 2: P2\n\n" in text
    assert ("You are assisting in solving a math problem." in text) == (task == "math")
    assert (T.UR2_FALLBACK in text) == (mode == "strong")
    assert "**Final Information**" in text and "{" not in text


@needs_specs
def test_every_template_is_verbatim_from_the_spec():
  rezero = spec_block(UR2_SPEC, "Judge prompt (a single user message", "```")
  math_judge = spec_block(UR2_SPEC, "Math judge prompt [P D.1]", "```")
  strong = spec_block(UR2_SPEC, "**Strong (training) prompt, non-math**", "~~~~")
  strong_math = spec_block(UR2_SPEC, "**Strong (training) prompt, math**", "~~~~")
  r3_answer = spec_block(R3_SPEC, "an LLM judge with temperature 0 and max 512 tokens", "```")
  r3_rel = spec_block(R3_SPEC, "The actual prompt (`calculate_doc_score`)", "```")
  fig6 = spec_block(R3_SPEC, "Figure 6 (first step), verbatim content", "```")
  fig7_instruction = spec_block(R3_SPEC, "- Instruction 1 becomes:", "```")
  # The constants are the spec blocks, character for character.
  assert T.REZERO_CORRECTNESS == rezero and T.UR2_MATH_JUDGE == math_judge
  assert T.UR2_SUMMARY_STRONG == strong and T.R3_ANSWER == r3_answer
  assert T.R3_RELEVANCE == r3_rel and T.R3_TEACHER_FIRST == fig6
  inputs = strong[strong.index("**Inputs:**"):strong.index("\n\nNow you should first")]
  assert T.UR2_SUMMARY_STRONG_MATH == strong_math.replace(
      "**Inputs:** (prev_reasoning / search_query / wikipedia_content as above)", inputs)
  # Each template renders to the spec text with the values in place.
  v = dict(question="Q1?", answer="A1", student_answer="S1", gold="G", pred="P",
           prev_reasoning="R", search_query="SQ", wikipedia_content="Wikipedia Content 1: W")
  assert user(T.render_rezero_correctness("Q1?", "A1", "S1")) == sub(rezero, **v)
  assert user(T.render_ur2_math_judge("Q1?", "G", "P")) == sub(math_judge, **v)
  assert user(T.render_ur2_summary("R", "SQ", ["W"], "qa", "strong")) == sub(strong, **v)
  assert user(T.render_ur2_summary("R", "SQ", ["W"], "math", "strong")) == sub(
      T.UR2_SUMMARY_STRONG_MATH, **v) and "{" not in sub(T.UR2_SUMMARY_STRONG_MATH, **v)
  assert user(T.render_r3_relevance("PR", "CA", "CQ", "D")) == r3_rel.replace(
      '{retrieved_docs if retrieved_docs else "No results found"}', "D").replace(
      "{problem}", "PR").replace("{current_analysis}", "CA").replace("{current_query}", "CQ")
  assert user(T.render_r3_answer("Q1?", "A1", ["G1", "G2"])) == r3_answer.replace(
      "- {gold_1}\n\n- {gold_2}\n...\n", "- G1\n\n- G2\n\n").replace(
      "{question}", "Q1?").replace("{answer}", "A1")
  assert user(T.render_r3_teacher("Q1?")) == sub(fig6, **v)
  # Figure 7: every difference the spec lists is in, the Figure 6 lines it replaces are out.
  nxt = T.R3_TEACHER_NEXT
  assert fig7_instruction in nxt
  with open(R3_SPEC, encoding="utf-8") as f:
    spec = " ".join(f.read().split())                     # quotes may wrap across lines
  for quoted in ("You are an expert in LLMs and RAG, with extensive expertise in decomposition.",
                 "[Analyze information based on previous steps and question]",
                 "[If information is insufficient, generate one query]",
                 "[If information is sufficient, provide the final answer]",
                 "Action in Uncertainty: If uncertain, attempt to solve the problem.",
                 "Propose a method to decompose the problem into sub-questions."):
    assert quoted in spec and quoted.replace("Action in Uncertainty:",
                                             "**Action in Uncertainty**:") in nxt
  for gone in ("knowledge retrieval, with extensive", "based on the analysis.]",
               "initiate an attempt", "into smaller sub-questions",
               "If the available information is adequate"):
    assert gone in fig6 and gone not in nxt
  assert "`#### Current Input:\\nThe question: {question}. The Previous Steps:" \
         "{steps_formatted.strip()}\\n#### Output:`" in spec
  assert nxt.endswith("#### Current Input:\nThe question: {question}. The Previous Steps:"
                      "{steps}\n#### Output:")
  assert len(nxt.split("\n")) == len(fig6.split("\n")) + 4      # 4 instruction lines added
  # Weak prompts: the sentences the spec quotes are there verbatim.
  with open(UR2_SPEC, encoding="utf-8") as f:
    ur2 = f.read()
  weak_open = ("You are tasked with reading and analyzing Wikipedia content based on the following "
               "inputs: Previous Reasoning Steps, Current Search Query, and Wikipedia Content. Your "
               "objective is to extract factual and relevant information from the Wikipedia "
               "Content that directly supports or informs the Current Search Query, and integrate "
               "it into the reasoning process in an objective and helpful manner.")
  weak_close = ('Now you should analyze the Wikipedia content and find helpful information based '
                'on the current search query "{search_query}" and previous reasoning steps.')
  assert weak_open in ur2 and weak_close in ur2
  assert weak_open in T.UR2_SUMMARY_WEAK and T.UR2_SUMMARY_WEAK.endswith(weak_close)
  assert T.UR2_SUMMARY_WEAK_MATH.startswith("**Task Instruction:**\n\nYou are assisting in "
                                            "solving a math problem. You are tasked with reading "
                                            "and analyzing Wikipedia content")
  assert T.UR2_SUMMARY_WEAK_MATH.endswith(weak_close)
  bullets = strong_math[strong_math.index("- Carefully read the provided"):
                        strong_math.index("\n\n**Output Format:**")]
  assert bullets in T.UR2_SUMMARY_WEAK_MATH
  # The fallback sentence and the code's two other replies.
  assert T.UR2_FALLBACK in strong and T.UR2_FALLBACK in strong_math
  assert f'"{T.UR2_NO_FINAL_INFORMATION}"' in ur2 and f'"{T.UR2_SUMMARY_FAILED}"' in ur2


def test_registry_render_errors_and_fallback_matches_the_rollout():
  assert set(T.TEMPLATES) == {"rezero_correctness", "r3_relevance", "r3_answer",
                              "r3_teacher_first", "r3_teacher_next", "ur2_summary_strong",
                              "ur2_summary_strong_math", "ur2_summary_weak",
                              "ur2_summary_weak_math", "ur2_math_judge"}
  for name, t in T.TEMPLATES.items():
    assert t.name == name and "§" in t.spec
    msgs = t.render(**{f: f"<{f}>" for f in t.fields})
    assert all(f"<{f}>" in msgs[-1]["content"] for f in t.fields)
  assert T.UR2_FALLBACK == ur2_protocol.FALLBACK                # what the UR² rollout checks
  with pytest.raises(ValueError, match=r"takes fields \['question', 'answer', 'student_answer'\]"
                     r"; missing \['student_answer'\], unexpected \['extra'\]"):
    T.TEMPLATES["rezero_correctness"].render(question="q", answer="a", extra="x")
  with pytest.raises(TypeError, match="field 'pred' must be a str"):
    T.TEMPLATES["ur2_math_judge"].render(question="q", gold="g", pred=3)
  with pytest.raises(KeyError, match="unknown template 'nope'; known: r3_answer"):
    T.get_template("nope")
  with pytest.raises(ValueError, match="golds must be a non-empty list"):
    T.render_r3_answer("q", "a", [])
  with pytest.raises(ValueError, match="mode must be 'strong' or 'weak'"):
    T.ur2_summary_template("qa", "medium")
  with pytest.raises(ValueError, match=r"steps\[0\] has no \['documents'\]"):
    T.render_r3_teacher("q", [{"analysis": "a", "query": "b"}])
  # A value that looks like a field is not substituted again; literal braces stay.
  text = user(T.render_ur2_math_judge("{gold}", "G", "{pred}"))
  assert "Question: {gold}\nGold: G\nPred: {pred}" in text and "\\text{}" in text


# ---- parsers ----
def test_parsers_on_well_formed_and_malformed_replies():
  P = T.Parsed
  assert T.parse_yes_no("Yes") == P(True, True)
  assert T.parse_yes_no("No.") == P(False, True)
  assert T.parse_yes_no("YES, the answer matches") == P(True, True)
  assert T.parse_yes_no("No, not yes") == P(True, True)             # the code's substring test
  assert T.parse_yes_no("I cannot tell") == P(False, False)
  assert T.parse_yes_no("") == P(False, False)

  assert T.parse_relevance("Relevance: 0.70\nEvaluation:\n- Relevance: on topic") == P(0.7, True)
  assert T.parse_relevance("relevance: 1") == P(1.0, True)
  assert T.parse_relevance("Relevance: 0.123") == P(0.12, True)     # [01]\.\d{2} first
  assert T.parse_relevance("Relevance: 7.5") == P(1.0, True)        # clamped
  assert T.parse_relevance("Relevance: 0.66", grid=0.1) == P(0.7, True)
  assert T.parse_relevance("Relevance: 0.04", grid=0.1) == P(0.0, True)
  assert T.parse_relevance("Relevance: x.xx") == P(0.0, False)
  assert T.parse_relevance("The documents are relevant (0.8).") == P(0.0, False)
  assert T.r3_relevance_heuristic("short analysis", "") == 0.39
  assert T.r3_relevance_heuristic(" ".join(["w"] * 31), "doc") == 1.0

  assert T.parse_true_false("Correctness analysis: matches.\nFinal answer: True") == P(True, True)
  assert T.parse_true_false("Correctness analysis: no.\nFinal answer: False") == P(False, True)
  assert T.parse_true_false("**Final answer:** TRUE") == P(True, True)
  assert T.parse_true_false("Final answer: False\n...\nFinal answer: True") == P(True, True)
  assert T.parse_true_false("The answer is true.") == P(False, False)
  assert T.parse_true_false("Final answer: unsure") == P(False, False)

  assert T.parse_math_judgment("Reason: same value.\nJudgment: Correct") == P(2.0, True)
  assert T.parse_math_judgment("Reason: one root.\nJudgment: Partially correct") == P(1.0, True)
  assert T.parse_math_judgment("Judgment:Incorrect") == P(0.0, True)
  assert T.parse_math_judgment("judgment: correct") == P(0.0, False)     # the code's regex
  assert T.parse_math_judgment("Looks right to me.") == P(0.0, False)

  assert T.parse_ur2_summary("**Final Information**\n\nQuillport is the capital of Zorbland.") \
      == P("Quillport is the capital of Zorbland.", True)
  assert T.parse_ur2_summary("Analysis...\n**Final Information**\n```\nThe river is long.\n```") \
      == P("The river is long.", True)
  wrapped = T.UR2_FALLBACK.replace(" which", "\n  which")
  assert T.parse_ur2_summary(f"Non-knowledge.\n**Final Information**\n```\n  {wrapped}\n```") \
      == P(T.UR2_FALLBACK, True, fallback=True)
  assert T.parse_ur2_summary("Echo **Final Information** label.\n**Final Information**\nFact.") \
      == P("Fact.", True)
  assert T.parse_ur2_summary("Here is a summary without the label.") == \
      P(T.UR2_NO_FINAL_INFORMATION, False)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Relvanc:0123456789. \nJudgmentCorIpyesYNoFinalsw*`#"))
               | st.characters(), max_size=80))
def test_parsers_never_raise_and_stay_in_range(reply):
  assert T.parse_yes_no(reply).value in (True, False)
  assert 0.0 <= T.parse_relevance(reply).value <= 1.0
  assert 0.0 <= T.parse_relevance(reply, grid=0.1).value <= 1.0
  assert T.parse_true_false(reply).value in (True, False)
  assert T.parse_math_judgment(reply).value in (0.0, 1.0, 2.0)
  assert isinstance(T.parse_ur2_summary(reply).value, str)


def test_template_judge_counts_unparsed_replies():
  replies = iter(["Relevance: 0.80", "garbage", "Relevance: 0.30\nEvaluation: ok", "Relevance:"])
  chat = ScriptedChat(lambda msgs: next(replies))
  judge = TemplateJudge(chat, "r3_relevance")
  rows = [dict(problem="p", current_analysis="a", current_query=f"q{i}", retrieved_docs="d")
          for i in range(4)]
  assert judge(rows) == [0.8, 0.0, 0.3, 0.0]
  assert judge.stats() == {"replies": 4, "unparsed": 2, "fallbacks": 0}
  assert chat.seen[0][0]["content"].startswith("You are a professional evaluator")
  summary = TemplateJudge(ScriptedChat(lambda m: f"**Final Information**\n{T.UR2_FALLBACK}"),
                          "ur2_summary_strong", max_tokens=64)
  out = summary.run([dict(prev_reasoning="", search_query="compute 2+2", wikipedia_content="")])
  assert out[0].fallback and summary.fallbacks == 1 and summary.max_tokens == 64
  assert summary.temperature == 0.2                           # the paper's training setting
  with pytest.raises(ValueError, match="has no reply parser"):
    TemplateJudge(chat, "r3_teacher_first")
