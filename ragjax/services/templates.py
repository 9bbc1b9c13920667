"""The judge, summariser and teacher prompts of ReZero, R3-RAG and UR², verbatim from the specs.

Each prompt is a named `Template` in `TEMPLATES` with the messages it renders to, the sampling
settings the paper's code used, and the parser of its reply:

| name | spec section | reply parsed as |
|---|---|---|
| `rezero_correctness` | seeds_ur2_rezero.md §B3 (1. reward_correctness) | yes / no |
| `r3_relevance` | seeds_rex_autorefine_r3.md §3.3 (document relevance) | score in [0, 1] |
| `r3_answer` | seeds_rex_autorefine_r3.md §3.3 (Acc_model) | True / False |
| `r3_teacher_first` | seeds_rex_autorefine_r3.md §3.5 (Figure 6) | a "Step j" step |
| `r3_teacher_next` | seeds_rex_autorefine_r3.md §3.5 (Figure 7) | a "Step j" step |
| `ur2_summary_strong` | seeds_ur2_rezero.md §A4.5 (strong, non-math) | summary or fallback |
| `ur2_summary_strong_math` | seeds_ur2_rezero.md §A4.5 (strong, math) | summary or fallback |
| `ur2_summary_weak` | seeds_ur2_rezero.md §A4.5 (weak, non-math) | summary |
| `ur2_summary_weak_math` | seeds_ur2_rezero.md §A4.5 (weak, math) | summary |
| `ur2_math_judge` | seeds_ur2_rezero.md §A3.1 (math judge) | 2.0 / 1.0 / 0.0 |

Constants from the same sections: `UR2_FALLBACK` (the summariser's fallback sentence),
`UR2_NO_FINAL_INFORMATION` and `UR2_SUMMARY_FAILED` (the code's replies for a missing label and
for a summariser that failed 5 times).

Parsers never raise: every one returns a `Parsed(value, ok)`, where `ok=False` marks a reply
that did not follow the format and `value` is then what the paper's code scores it as (each
parser's docstring says which).  `TemplateJudge` (ragjax.services.judge) counts them.

Where the spec gives less than the whole prompt, the gap is filled as each constant's comment
says ([D] in the spec's terms); the weak UR² prompts are the main case.  The R3-RAG teacher's
reply is one step of R3-RAG's own protocol, so it is parsed by the rollout's
`ragjax.rollout.protocols.r3_rag.parse_r3_step` (services do not import rollout, so the caller
applies it).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from ragjax.services.chat_model import Message

REZERO_CORRECTNESS = (
    "You are grading a student's answer to a question. For the following question, "
    "compare the student's answer to the correct answer. Reply with 'Yes' if the "
    "student's answer contains the correct information, even if it's not an exact "
    "match. If the student's answer doesn't contain the right information or is "
    "completely incorrect, reply with 'No'.\n"
    '\n'
    'Question: {question}\n'
    'Correct Answer: {answer}\n'
    'Student Answer: {student_answer}\n'
    '\n'
    "Your response should be just 'Yes' or 'No'.")

UR2_MATH_JUDGE = (
    'You are an expert math evaluator.\n'
    'Given a question, a gold answer and a predicted answer, judge if they are '
    'mathematically consistent.\n'
    '\n'
    'Ignore formatting (e.g., \\text{}, spacing, capitalization).\n'
    'Accept equivalent expressions (e.g., factored vs expanded form).\n'
    'If the prediction matches only part of a multi-part answer (e.g. one of '
    'several intervals or roots), label it as Partially correct.\n'
    '\n'
    'Output format:\n'
    'Reason: Brief explanation\n'
    'Judgment: Correct / Partially correct / Incorrect\n'
    '\n'
    'Input:\n'
    'Question: {question}\n'
    'Gold: {gold}\n'
    'Pred: {pred}')

R3_ANSWER = (
    'Please perform a correctness analysis based on the following criteria:\n'
    '1. Existence of an Answer: Determine whether the question has a definitive '
    'answer among the standard answers provided.\n'
    '2. Comparison with Standard Answers: If an answer exists, evaluate whether '
    'the given answer satisfies any one of the standard answers.\n'
    '3. Handling Uncertainty: If the question has a definitive answer but the '
    'given answer indicates uncertainty or inability to determine, consider the '
    'final answer as False.\n'
    '\n'
    'Output format:\n'
    'Correctness analysis: [Your detailed analysis]\n'
    'Final answer: True or False\n'
    '\n'
    'Guidelines:\n'
    'True: If the given answer is relevant, accurate, and complete based on the '
    'standard answers.\n'
    'False: If the answer is irrelevant, inaccurate, incomplete, or does not '
    "provide the required information, even if it doesn't directly contradict the "
    'standard answers.\n'
    '\n'
    'Example:\n'
    'Model Input:\n'
    'Question: What nationality is the director of film Wedding Night In Paradise '
    '(1950 Film)?\n'
    'Given Answer: The film "Wedding Night In Paradise" from 1950 does not exist '
    'or is not documented, so the nationality of its director cannot be determined.\n'
    'Standard Answer List:\n'
    '- Hungarian\n'
    '\n'
    'Model Output:\n'
    'Correctness analysis: The given answer does not address the nationality of '
    'the director and instead claims the film is undocumented. Assuming the film '
    'exists and the standard answer is "Hungarian," the answer is irrelevant and '
    'incomplete as it fails to provide the required nationality information.\n'
    'Final answer: False\n'
    '\n'
    'Now, given the following input, provide the corresponding output:\n'
    'Model Input:\n'
    'Question: {question}\n'
    'Given Answer: {answer}\n'
    'Standard Answer List:\n'
    '- {gold_1}\n'
    '\n'
    '- {gold_2}\n'
    '...\n'
    'Model Output:')

R3_RELEVANCE = (
    'Evaluate the current step based on the following criteria (0.0-1.0 scale):\n'
    '\n'
    '[Problem]\n'
    '{problem}\n'
    '\n'
    '[Current Analysis]\n'
    '{current_analysis}\n'
    '\n'
    '[Search Query]\n'
    '{current_query}\n'
    '\n'
    '[Retrieved Documents]\n'
    '{retrieved_docs if retrieved_docs else "No results found"}\n'
    '\n'
    'Evaluation Criteria:\n'
    '1. Relevance:\n'
    '   - Match between search results and query intent. \n'
    '   - Usefulness for problem solving (information completeness, accuracy)\n'
    '4. If ANY of these fatal errors occur:\n'
    '    - Contradicts previous steps\n'
    '    - Contains illogical reasoning\n'
    '   Return 0.0 for ALL dimensions.\n'
    '\n'
    '\n'
    'Output MUST follow EXACTLY this format(Scores range from 0.0 to 1.0 and the '
    'passing score is 0.6):\n'
    'Relevance: x.xx\n'
    'Evaluation:\n'
    '- Relevance: [brief explanation]')

R3_TEACHER_FIRST = (
    '# Role\n'
    'You are an expert in large language models and knowledge retrieval, with '
    'extensive expertise in problem decomposition.\n'
    '# Answer Format:\n'
    'The problem analysis: [Analyze information based on the question.]\n'
    '**Either:**\n'
    'The retrieval query: [If information is insufficient, generate one query '
    'based on the analysis.]\n'
    '**OR:**\n'
    'The final answer: [If information is sufficient, provide the final answer '
    'based on the analysis.]\n'
    '# Instructions:\n'
    '1. **The Problem Analysis**:\n'
    '- **Decision Making**:\n'
    '- **Sufficient Information**: If the available information is adequate and no '
    'more query need to retrieve, use your parameter knowledge and reasoning '
    'capability to solve it and get the answer. Finaly, output the answer in the '
    '"The final answer:" section.\n'
    '- **Insufficient Information**: If the information is lacking, identify what '
    'information is missing:\n'
    '- **Determine Next Retrieval**: Consider what content should be retrieved '
    'next and decomposite the query into simpler retrieval queries.\n'
    '2. **Response Formatting**:\n'
    '- **Start with Analysis**: Always begin with "The problem analysis:" followed '
    'by the detailed analysis. Only one analysis is permitted; therefore, include '
    'all your analytical content within this section.\n'
    '- **Choose Appropriate Section**: Based on the decision:\n'
    '- Include "The retrieval query:" if more information is needed.\n'
    '- Include "The final answer:" if sufficient information is available.\n'
    '- **Generate a Single Query**: Based on the analysis, formulate one targeted '
    'query and place it in the "The retrieval query:" section. Ensure that only '
    'one query is generated, focusing on the first retrieval question needed.\n'
    '- **Language Consistency**: Provide the entire response in English, '
    'regardless of the input language.\n'
    '# Key Competencies\n'
    '1. **Decision Making**:\n'
    '- **Assessment**: Evaluate whether it is feasible to resolve the entire '
    'problem based on all preceding steps.\n'
    '- **Action in Uncertainty**: If uncertain, initiate an attempt to solve the problem.\n'
    '- **Failure Handling**: If the solution process encounters a failure, '
    'terminate the attempt and analyze which information should be retrieved next.\n'
    '2. **Decomposition of Retrieval Content**:\n'
    '- **Problem Breakdown**: When analysis requires solving a problem, decompose '
    'complex questions into smaller, actionable sub-questions (atomic problems).\n'
    '- **Step-by-Step Resolution**: Address these sub-questions sequentially and '
    'establish a logical sequence to answer the original question.\n'
    '- **Identifying Broad Problems**: If the analysis reveals that the '
    'information retrieved in the last step does not align with the query, this '
    'indicates that the problem is too broad. In such cases:\n'
    '- **Suggestion**: Propose a method to decompose the problem into smaller '
    'sub-questions.\n'
    '- **Implementation**: Attempt to break down the original query into simpler, '
    'more manageable questions.\n'
    '- **Methods of Decomposition**: Complex questions can be decomposed into '
    '**two fundamental forms**:\n'
    '- **Sequential Decomposition**:\n'
    '- **Definition**: Break the problem into a series of dependent steps, where '
    'each step relies on the result of the previous one.\n'
    '- **Parallel Decomposition**:\n'
    '- **Definition**: Split the problem into multiple independent sub-problems, '
    'solve each separately, and then combine the results.\n'
    '#### Current Input:\n'
    'The question: {question}\n'
    '#### Output:')

_R3_NEXT_INSTRUCTION = (
    '- **Review Previous Steps**: Examine all prior steps, including analyses, '
    'queries, and documents.\n'
    '- **Decision Making**:\n'
    '- **Sufficient Information**: If the information is adequate, analyze it to '
    'solve the problem and output the answer in the "The final answer:" section.\n'
    '- **Insufficient Information**: If the information is lacking:\n'
    '- **Evaluate Last Step**: Analyze the documents obtained in the last step to '
    'determine if they are relevant to the query or the problem at hand.\n'
    '- **Utilizing parameter knowledge**: If the retrieval results of the query '
    "are not relevant, check if the model's own parameter knowledge can response "
    'the query.\n'
    '- **Assess Previous Steps**: Identify what information is missing from the '
    'overall previous steps.\n'
    '- **Determine Next Retrieval**: Consider what content should be retrieved '
    'next and decomposite the query into simpler retrieval queries.')

UR2_SUMMARY_STRONG = (
    '**Task Instruction:**\n'
    '\n'
    'Your first task is to determine whether the provided query is a '
    'knowledge-based query that can be answered using factual information from '
    'Wikipedia, or if it is a query requiring design, computation, or complex '
    'reasoning (e.g., creating a plan, performing calculations, or generating '
    'creative content). \n'
    '\n'
    '**Step 1: Query Classification**\n'
    '- If the query is knowledge-based (e.g., asking for facts, definitions, or '
    'historical information), proceed to analyze the Wikipedia content and extract '
    'relevant information.\n'
    '- If the query is not knowledge-based (e.g., it involves designing something, '
    'performing computations, or requires subjective reasoning), immediately '
    'return the following response under **Final Information**:\n'
    '  ```\n'
    '  This query requires design, computation, or complex reasoning, which '
    'exceeds the capabilities of a search engine. Please input another query or '
    'proceed with direct reasoning.\n'
    '  ```\n'
    '\n'
    '**Step 2: Analyze Knowledge-Based Queries (if applicable)**\n'
    'If the query is knowledge-based:\n'
    '- Carefully read the Wikipedia content.\n'
    '- Identify factual information that directly relates to the **Current Search '
    'Query** and may assist in refining or expanding the reasoning.\n'
    '- Maintain objectivity: Do not attempt to validate, confirm, or correct the '
    '**Previous Reasoning Steps**. Treat them as context only—useful for '
    'understanding, but potentially flawed.\n'
    '- Your role is to supplement the reasoning neutrally with accurate, relevant '
    'facts from Wikipedia.\n'
    '\n'
    '**Output Format:**\n'
    '- Present the helpful information for the current search query beginning with '
    '`**Final Information**` as shown below.\n'
    '\n'
    '**Final Information**\n'
    '\n'
    '[Helpful information or the non-knowledge-based response]\n'
    '\n'
    '---\n'
    '**Inputs:**\n'
    '- **Previous Reasoning Steps:**  \n'
    '{prev_reasoning}\n'
    '\n'
    '- **Current Search Query:**  \n'
    '{search_query}\n'
    '\n'
    '- **Wikipedia Content:**  \n'
    '{wikipedia_content}\n'
    '\n'
    'Now you should first classify the query "{search_query}" as knowledge-based '
    'or non-knowledge-based. If knowledge-based, analyze the Wikipedia content and '
    'find helpful information. If non-knowledge-based, return the specified response.')

UR2_SUMMARY_STRONG_MATH = (
    '**Task Instruction:**\n'
    '\n'
    'You are assisting in solving a math problem. Your task is to determine '
    'whether the current query requires external factual knowledge (such as '
    'definitions, formulas, theorems, or lookup values), and if so, extract '
    'accurate and relevant information from the provided Wikipedia content to '
    'support or enhance the reasoning process.\n'
    '\n'
    '**Step 1: Classify the Query Type**\n'
    '\n'
    'Determine whether the query falls into one of the following categories:\n'
    '\n'
    '- **Knowledge-based query**: Can be directly answered using factual knowledge '
    '(e.g., definitions, known formulas, theorems, constants, or table lookups).\n'
    '- **Reasoning-based query**: Requires multi-step deduction, logical '
    'reasoning, or constructive computation, and cannot be directly answered by '
    'retrieval alone.\n'
    '\n'
    '- If the query is knowledge-based, proceed to Step 2.\n'
    '- If the query is reasoning-based, return the following message under **Final '
    'Information**:\n'
    '```\n'
    '  This query requires design, computation, or complex reasoning, which '
    'exceeds the capabilities of a search engine. Please input another query or '
    'proceed with direct reasoning.\n'
    '```\n'
    '\n'
    '**Step 2: Analyze Knowledge-Based Queries (if applicable)**\n'
    '\n'
    'If the query is classified as knowledge-based:\n'
    '\n'
    '- Carefully read the provided **Wikipedia Content**;\n'
    '- Extract factual information that can:\n'
    '    1. Directly assist in answering the **Current Search Query**, or\n'
    '    2. Help validate, complete, or correct earlier reasoning steps.\n'
    '\n'
    '- The extracted information should be:\n'
    '    1. Accurate and trustworthy;\n'
    '    2. Closely relevant to the query;\n'
    '    3. Helpful in improving, expanding, or supporting the mathematical reasoning.\n'
    '\n'
    'Important:  \n'
    'Do NOT attempt to correct or rewrite the previous reasoning. Treat it only as '
    'contextual reference that may be flawed.\n'
    '\n'
    '**Output Format:**\n'
    'Present the information beginning with the label `**Final Information**` as '
    'shown below.\n'
    '\n'
    '**Final Information**\n'
    '\n'
    '[Helpful factual information, or the non-knowledge-based response]\n'
    '\n'
    '{INPUTS}\n'
    '\n'
    'Now determine whether the query "{search_query}" is knowledge-based or '
    'reasoning-based.  \n'
    'If knowledge-based, extract and present helpful information from Wikipedia.  \n'
    'If not, return the specified response.')

# ---- UR² summariser (seeds_ur2_rezero.md §A4.5) ----
UR2_FALLBACK = ("This query requires design, computation, or complex reasoning, which exceeds the "
                "capabilities of a search engine. Please input another query or proceed with "
                "direct reasoning.")
UR2_NO_FINAL_INFORMATION = "No Final Information found in GPT response."
UR2_SUMMARY_FAILED = ("Failed to give Wikipedia content, possibly due to political sensitivity, "
                      "retrieval blocking, or summarization errors caused by restricted content.")
UR2_LABEL = "**Final Information**"

# The math prompts' "**Inputs:** (... as above)": the same inputs block, after a blank line.
_UR2_INPUTS = ("**Inputs:**\n"
               "- **Previous Reasoning Steps:**  \n{prev_reasoning}\n\n"
               "- **Current Search Query:**  \n{search_query}\n\n"
               "- **Wikipedia Content:**  \n{wikipedia_content}")
UR2_SUMMARY_STRONG_MATH = UR2_SUMMARY_STRONG_MATH.replace("{INPUTS}", _UR2_INPUTS)

# Weak (evaluation) prompts [D]: the spec quotes their opening instruction and closing sentence
# and says they are the strong prompts "without Step 1" (same inputs, same guidelines, same
# `**Final Information**` block; the non-math one with Analyze / Maintain Objectivity
# guidelines, the math one with the strong math prompt's extraction bullets).  The text
# between the quoted sentences is therefore the strong prompt's Step 2 text, and the output
# placeholder is the paper's D.3 one ("[Helpful information]" / "[Helpful factual
# information]").
_UR2_WEAK_CLOSE = ('Now you should analyze the Wikipedia content and find helpful information '
                   'based on the current search query "{search_query}" and previous reasoning '
                   'steps.')
UR2_SUMMARY_WEAK = (
    "**Task Instruction:**\n\n"
    "You are tasked with reading and analyzing Wikipedia content based on the following inputs: "
    "Previous Reasoning Steps, Current Search Query, and Wikipedia Content. Your objective is to "
    "extract factual and relevant information from the Wikipedia Content that directly supports "
    "or informs the Current Search Query, and integrate it into the reasoning process in an "
    "objective and helpful manner.\n\n"
    "**Guidelines:**\n"
    "- Analyze the Wikipedia Content: Carefully read the Wikipedia content. Identify factual "
    "information that directly relates to the **Current Search Query** and may assist in "
    "refining or expanding the reasoning.\n"
    "- Maintain Objectivity: Do not attempt to validate, confirm, or correct the **Previous "
    "Reasoning Steps**. Treat them as context only—useful for understanding, but potentially "
    "flawed.\n\n"
    "**Output Format:**\n"
    "- Present the helpful information for the current search query beginning with "
    "`**Final Information**` as shown below.\n\n"
    "**Final Information**\n\n"
    "[Helpful information]\n\n"
    "---\n" + _UR2_INPUTS + "\n\n" + _UR2_WEAK_CLOSE)
UR2_SUMMARY_WEAK_MATH = (
    "**Task Instruction:**\n\n"
    "You are assisting in solving a math problem. You are tasked with reading and analyzing "
    "Wikipedia content based on the following inputs: Previous Reasoning Steps, Current Search "
    "Query, and Wikipedia Content. Your task is to extract accurate and relevant information "
    "from the provided Wikipedia content to support or enhance the reasoning process.\n\n"
    "- Carefully read the provided **Wikipedia Content**;\n"
    "- Extract factual information that can:\n"
    "    1. Directly assist in answering the **Current Search Query**, or\n"
    "    2. Help validate, complete, or correct earlier reasoning steps.\n\n"
    "- The extracted information should be:\n"
    "    1. Accurate and trustworthy;\n"
    "    2. Closely relevant to the query;\n"
    "    3. Helpful in improving, expanding, or supporting the mathematical reasoning.\n\n"
    "Important:  \n"
    "Do NOT attempt to correct or rewrite the previous reasoning. Treat it only as contextual "
    "reference that may be flawed.\n\n"
    "**Output Format:**\n"
    "Present the information beginning with the label `**Final Information**` as shown below.\n\n"
    "**Final Information**\n\n"
    "[Helpful factual information]\n\n" + _UR2_INPUTS + "\n\n" + _UR2_WEAK_CLOSE)


# ---- R3-RAG teacher, subsequent steps (seeds_rex_autorefine_r3.md §3.5, Figure 7) ----
def _edit(text: str, old: str, new: str) -> str:
  if text.count(old) != 1:
    raise AssertionError(f"template edit: {old[:60]!r} occurs {text.count(old)} times")
  return text.replace(old, new)


def _figure7(first: str) -> str:
  """Figure 7 = Figure 6 with the differences the spec lists verbatim."""
  t = _edit(first, "You are an expert in large language models and knowledge retrieval, with "
            "extensive expertise in problem decomposition.",
            "You are an expert in LLMs and RAG, with extensive expertise in decomposition.")
  t = _edit(t, "[Analyze information based on the question.]",
            "[Analyze information based on previous steps and question]")
  t = _edit(t, "[If information is insufficient, generate one query based on the analysis.]",
            "[If information is insufficient, generate one query]")
  t = _edit(t, "[If information is sufficient, provide the final answer based on the analysis.]",
            "[If information is sufficient, provide the final answer]")
  start = t.index("1. **The Problem Analysis**:\n") + len("1. **The Problem Analysis**:\n")
  end = t.index("2. **Response Formatting**:")
  t = t[:start] + _R3_NEXT_INSTRUCTION + "\n" + t[end:]
  t = _edit(t, "If uncertain, initiate an attempt to solve the problem.",
            "If uncertain, attempt to solve the problem.")
  t = _edit(t, "Propose a method to decompose the problem into smaller sub-questions.",
            "Propose a method to decompose the problem into sub-questions.")
  return _edit(t, "#### Current Input:\nThe question: {question}\n#### Output:",
               "#### Current Input:\nThe question: {question}. The Previous Steps:{steps}\n"
               "#### Output:")


R3_TEACHER_NEXT = _figure7(R3_TEACHER_FIRST)
# The code's f-string expression becomes a plain field; `render_r3_relevance` applies it.
R3_RELEVANCE_USER = _edit(R3_RELEVANCE, '{retrieved_docs if retrieved_docs else "No results found"}',
                          "{retrieved_docs}")
# The spec's "- {gold_1}\n\n- {gold_2}\n...\n" is a list: one field, built by `render_r3_answer`.
R3_ANSWER_USER = _edit(R3_ANSWER, "- {gold_1}\n\n- {gold_2}\n...\n", "{gold_list}")
R3_RELEVANCE_SYSTEM = "You are a professional evaluator. Analyze step quality rigorously."
R3_ANSWER_SYSTEM = "You are a helpful assistant."
R3_MAX_DOC_CHARS = 512


# ---- parsing ----
@dataclasses.dataclass(frozen=True)
class Parsed:
  """A parsed reply: `value` (bool / float / str), `ok` False when the reply did not follow the
  format (value is then the paper's score for such a reply), `fallback` for UR²'s sentence."""
  value: Any
  ok: bool
  fallback: bool = False


def parse_yes_no(reply: str) -> Parsed:
  """ReZero's judge (§B3, 1(d)): correct iff the reply contains "yes", case-insensitive — the
  code's lenient substring test, kept (so "No, not yes" counts as yes).  A reply without the
  word "yes" or "no" is unparsed and, as in the code, scores False."""
  low = str(reply).lower()
  return Parsed("yes" in low, re.search(r"\b(yes|no)\b", low) is not None)


_RELEVANCE = re.compile(r"(Relevance):\s*([01]\.\d{2}|\d\.?\d*)", re.IGNORECASE)


def parse_relevance(reply: str, grid: Optional[float] = None) -> Parsed:
  """R3-RAG's relevance (§3.3): the first `Relevance: x` (the code's regex, case-insensitive),
  clamped to [0, 1] and rounded to 3 decimals.  `grid=0.1` snaps to the paper's {0, 0.1, ...,
  1}.  The code raises on a reply without a score (a bug, says the spec); here it is unparsed
  and scores 0.0, the spec's suggested default."""
  m = _RELEVANCE.search(str(reply))
  if m is None:
    return Parsed(0.0, False)
  try:
    x = float(m.group(2))
  except ValueError:
    return Parsed(0.0, False)
  if math.isnan(x):
    return Parsed(0.0, False)
  x = min(1.0, max(0.0, x))
  if grid:
    x = round(round(x / grid) * grid, 10)
  return Parsed(round(x, 3), True)


def r3_relevance_heuristic(analysis: str, docs: str) -> float:
  """R3-RAG's score when the judge failed 3 times (§3.3): 0.3·(1 if the analysis has > 15
  words else 0.5) + 0.4·(1 if > 30 words else 0.6) + 0.3·(1 if docs are non-empty else 0)."""
  n = len(str(analysis).split())
  return round(0.3 * (1.0 if n > 15 else 0.5) + 0.4 * (1.0 if n > 30 else 0.6)
               + 0.3 * (1.0 if str(docs).strip() else 0.0), 3)


def parse_true_false(reply: str) -> Parsed:
  """R3-RAG's answer judge (§3.3): read the last line starting `Final answer:` (leading
  spaces, `*` and `#` ignored, any case); "true" in it means correct.  No such line, or one
  with neither "true" nor "false", is unparsed and scores False (what the code gives after
  its retries)."""
  verdict = None
  for line in str(reply).splitlines():
    s = line.strip().lstrip("*#").strip().lower()
    if s.startswith("final answer:"):
      verdict = s[len("final answer:"):]
  if verdict is None:
    return Parsed(False, False)
  return Parsed("true" in verdict, "true" in verdict or "false" in verdict)


_JUDGMENT = re.compile(r"Judgment:\s*(Correct|Partially correct|Incorrect)")
MATH_JUDGE_SCORES = {"Correct": 2.0, "Partially correct": 1.0, "Incorrect": 0.0}


def parse_math_judgment(reply: str) -> Parsed:
  """UR²'s math judge (§A3.1): the code's regex `Judgment:\\s*(Correct|Partially correct|
  Incorrect)` (first match) -> 2.0 / 1.0 / 0.0; an unparsable reply scores 0.0 (spec: "Incorrect/
  unparsable -> 0.0")."""
  m = _JUDGMENT.search(str(reply))
  if m is None:
    return Parsed(0.0, False)
  return Parsed(MATH_JUDGE_SCORES[m.group(1)], True)


def parse_ur2_summary(reply: str) -> Parsed:
  """UR²'s summary (§A4.5): the text after the last `**Final Information**`, ``` fences removed,
  stripped; exactly `UR2_FALLBACK` (fallback=True) when it contains the fallback sentence
  (compared with whitespace collapsed); `UR2_NO_FINAL_INFORMATION` (unparsed) when the label is
  missing, as the code returns."""
  text = str(reply)
  if UR2_LABEL not in text:
    return Parsed(UR2_NO_FINAL_INFORMATION, False)
  info = text.rsplit(UR2_LABEL, 1)[1].replace("```", "").strip()
  if UR2_FALLBACK in " ".join(info.split()):
    return Parsed(UR2_FALLBACK, True, fallback=True)
  return Parsed(info, True)


# ---- rendering ----
_FIELD = re.compile(r"\{(\w+)\}")


def fill(text: str, values: Mapping[str, str]) -> str:
  """Replaces `{name}` for the given names in one pass (other braces, e.g. `\\text{}`, stay;
  a value containing `{name}` is not substituted again)."""
  return _FIELD.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
                    text)


def template_fields(text: str) -> tuple[str, ...]:
  return tuple(dict.fromkeys(_FIELD.findall(text)))


@dataclasses.dataclass(frozen=True)
class Template:
  """A prompt: `user` text with `{field}`s, an optional system message, the sampling settings
  the paper's code used, and the reply parser (None: parsed elsewhere, see module docstring)."""
  name: str
  spec: str
  user: str
  system: Optional[str] = None
  parse: Optional[Callable[[str], Parsed]] = None
  temperature: float = 0.0
  max_tokens: int = 512
  top_p: float = 1.0

  @property
  def fields(self) -> tuple[str, ...]:
    return template_fields(self.user)

  def render(self, **values) -> list[Message]:
    """The chat messages for these field values; every field is required, no other is taken."""
    missing = [f for f in self.fields if f not in values]
    extra = [k for k in values if k not in self.fields]
    if missing or extra:
      raise ValueError(f"template {self.name!r} takes fields {list(self.fields)}; missing "
                       f"{missing}, unexpected {extra}")
    for k, v in values.items():
      if not isinstance(v, str):
        raise TypeError(f"template {self.name!r}: field {k!r} must be a str, got "
                        f"{type(v).__name__}")
    head = [{"role": "system", "content": self.system}] if self.system is not None else []
    return head + [{"role": "user", "content": fill(self.user, values)}]


_UR2 = "seeds_ur2_rezero.md"
_R3 = "seeds_rex_autorefine_r3.md"
TEMPLATES: dict[str, Template] = {t.name: t for t in (
    # ReZero: the frozen base model at temperature 0.1, top_p 0.95; one user message.  The token
    # budget is not in the spec [D]: 32 is enough for "Yes" / "No".
    Template("rezero_correctness", f"{_UR2} §B3 (reward_correctness)", REZERO_CORRECTNESS,
             parse=parse_yes_no, temperature=0.1, top_p=0.95, max_tokens=32),
    # R3-RAG judges: temperature 0, max 512 tokens (the answer judge's settings; the relevance
    # judge shares its endpoint, its own settings are not in the spec [D]).
    Template("r3_relevance", f"{_R3} §3.3 (document relevance)", R3_RELEVANCE_USER,
             system=R3_RELEVANCE_SYSTEM, parse=parse_relevance),
    Template("r3_answer", f"{_R3} §3.3 (Acc_model)", R3_ANSWER_USER, system=R3_ANSWER_SYSTEM,
             parse=parse_true_false),
    # R3-RAG teacher (DeepSeek-V3): first attempt at temperature 0.0, later ones at 0.9,
    # max_tokens 256 (§3.5 [C]).  One user message [D].
    Template("r3_teacher_first", f"{_R3} §3.5 (Figure 6)", R3_TEACHER_FIRST, max_tokens=256),
    Template("r3_teacher_next", f"{_R3} §3.5 (Figure 7)", R3_TEACHER_NEXT, max_tokens=256),
    # UR² summariser: training (strong) gpt-4.1-mini at temperature 0.2, max_tokens 4096;
    # evaluation (weak) gpt-4.1 at 0.3, top_p 0.5, 2048; math Qwen-3-32B at 0.3, top_p 0.7,
    # 8192.  One user message [D].
    Template("ur2_summary_strong", f"{_UR2} §A4.5 (strong, non-math)", UR2_SUMMARY_STRONG,
             parse=parse_ur2_summary, temperature=0.2, max_tokens=4096),
    Template("ur2_summary_strong_math", f"{_UR2} §A4.5 (strong, math)", UR2_SUMMARY_STRONG_MATH,
             parse=parse_ur2_summary, temperature=0.3, top_p=0.7, max_tokens=8192),
    Template("ur2_summary_weak", f"{_UR2} §A4.5 (weak, non-math)", UR2_SUMMARY_WEAK,
             parse=parse_ur2_summary, temperature=0.3, top_p=0.5, max_tokens=2048),
    Template("ur2_summary_weak_math", f"{_UR2} §A4.5 (weak, math)", UR2_SUMMARY_WEAK_MATH,
             parse=parse_ur2_summary, temperature=0.3, top_p=0.7, max_tokens=8192),
    # UR² math judge: gpt-4.1-mini at temperature 0.0, max_tokens 512.  One user message [D].
    Template("ur2_math_judge", f"{_UR2} §A3.1 (math judge)", UR2_MATH_JUDGE,
             parse=parse_math_judgment, max_tokens=512),
)}


def get_template(name: str) -> Template:
  if name not in TEMPLATES:
    raise KeyError(f"unknown template {name!r}; known: {', '.join(sorted(TEMPLATES))}")
  return TEMPLATES[name]


# ---- typed renderers (the inputs each paper's code builds) ----
def render_rezero_correctness(question: str, answer: str, student_answer: str) -> list[Message]:
  """§B3: `student_answer` is the whole last assistant message in the code (the spec advises
  passing only the `<answer>` content, §B9.5)."""
  return TEMPLATES["rezero_correctness"].render(question=question, answer=answer,
                                                student_answer=student_answer)


def r3_doc_string(docs, max_chars: int = R3_MAX_DOC_CHARS) -> str:
  """The step's documents as the code passes them: contents joined by newlines (§3.2), the
  joined string cut to `max_chars` (§3.3)."""
  text = docs if isinstance(docs, str) else "\n".join(str(d) for d in docs)
  return text[:max_chars]


def render_r3_relevance(problem: str, current_analysis: str, current_query: str,
                        retrieved_docs, max_doc_chars: int = R3_MAX_DOC_CHARS) -> list[Message]:
  """§3.3: `problem` is the RL prompt text; `retrieved_docs` a string or the step's passage
  contents; empty documents render as "No results found"."""
  docs = r3_doc_string(retrieved_docs, max_doc_chars)
  return TEMPLATES["r3_relevance"].render(problem=problem, current_analysis=current_analysis,
                                          current_query=current_query,
                                          retrieved_docs=docs if docs else "No results found")


def render_r3_answer(question: str, answer: str, golds: Sequence[str]) -> list[Message]:
  """§3.3: `question` is the RL prompt ("The question: ..."); each gold answer is a `- gold`
  line followed by a blank line, the layout of the prompt's own example."""
  if isinstance(golds, str) or not golds:
    raise ValueError("golds must be a non-empty list of gold answers")
  return TEMPLATES["r3_answer"].render(question=question, answer=answer,
                                       gold_list="".join(f"- {g}\n\n" for g in golds))


def render_r3_teacher(question: str, steps: Sequence[Mapping[str, str]] = ()) -> list[Message]:
  """§3.5: Figure 6 for the first step, Figure 7 after that.  Each previous step is a mapping
  with "analysis", "query" and "documents", rendered `Step {idx}:\\nThe problem analysis:
  ...\\nThe retrieval query: ...\\nThe retrieval documents: ...\\n\\n` (idx from 1), joined and
  stripped."""
  if not steps:
    return TEMPLATES["r3_teacher_first"].render(question=question)
  parts = []
  for i, s in enumerate(steps, 1):
    missing = [k for k in ("analysis", "query", "documents") if k not in s]
    if missing:
      raise ValueError(f"steps[{i - 1}] has no {missing}")
    parts.append(f"Step {i}:\nThe problem analysis: {s['analysis']}\nThe retrieval query: "
                 f"{s['query']}\nThe retrieval documents: {s['documents']}\n\n")
  return TEMPLATES["r3_teacher_next"].render(question=question, steps="".join(parts).strip())


def ur2_wikipedia_content(passages: Sequence[str]) -> str:
  """§A4.5: `Wikipedia Content {i}: {passage}`, i from 1 [D], joined by blank lines."""
  return "\n\n".join(f"Wikipedia Content {i}: {p}" for i, p in enumerate(passages, 1))


def ur2_summary_template(task: str = "qa", mode: str = "strong") -> Template:
  """The summariser prompt for a task ("math" or any other) and mode ("strong" for training,
  with the fallback; "weak" for evaluation)."""
  if mode not in ("strong", "weak"):
    raise ValueError(f"mode must be 'strong' or 'weak', got {mode!r}")
  return TEMPLATES[f"ur2_summary_{mode}" + ("_math" if task == "math" else "")]


def render_ur2_summary(prev_reasoning: str, search_query: str, passages: Sequence[str],
                       task: str = "qa", mode: str = "strong") -> list[Message]:
  return ur2_summary_template(task, mode).render(
      prev_reasoning=prev_reasoning, search_query=search_query,
      wikipedia_content=ur2_wikipedia_content(passages))


def render_ur2_math_judge(question: str, gold: str, pred: str) -> list[Message]:
  return TEMPLATES["ur2_math_judge"].render(question=question, gold=gold, pred=pred)
