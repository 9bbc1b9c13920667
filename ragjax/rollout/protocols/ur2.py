"""UR²'s protocol (Li et al. 2025, "UR²: Unify RAG and Reasoning"; seeds §A2).

Free-text reasoning, `<|begin_of_query|> q <|end_of_query|>` queries, documents in
`<|begin_of_documents|> ... <|end_of_documents|>`, answers as `\\boxed{}` or "the correct answer
is: X".  Prompts are App. D.2 verbatim (with the code's CoT prompts for questions that get no
retrieval).  A turn that does not end in a query ends the trajectory; the 5th generation is
final whatever it contains (at most 4 retrievals).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional, Sequence

from ragjax import registry
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Action, Kind, PromptInput, Protocol, hit_contents
from ragjax.rollout.segments import Segment

BEGIN_QUERY, END_QUERY = "<|begin_of_query|>", "<|end_of_query|>"
BEGIN_DOCS, END_DOCS = "<|begin_of_documents|>", "<|end_of_documents|>"

MCQ_RETRIEVAL = """You are solving a multiple-choice question. Analyze each option carefully and logically. Think step by step: consider the meaning and implications of each option, eliminate incorrect ones with clear reasoning, and select the best answer through comparison.

During your reasoning, if you're unsure about any fact, you may issue a **search query** like this:
<|begin_of_query|> your concise query (less than 20 words) <|end_of_query|>

* You can issue **multiple queries** at different steps in your reasoning.
* **Each query must target only one fact or statement**. Do not combine multiple ideas in a single query.
  * ✅ Example:
    * <|begin_of_query|> What are the common symptoms of pneumonia? <|end_of_query|>
    * <|begin_of_query|> What is the typical treatment for pneumonia in elderly patients? <|end_of_query|>
  * ❌ Do **not** combine them like this:
    * <|begin_of_query|> What are the symptoms and treatments for pneumonia in elderly patients? <|end_of_query|>
* You may issue **at most four queries** in total — use them wisely.

Once documents are returned in this format:
<|begin_of_documents|> ... (search results here) <|end_of_documents|>

use the retrieved documents to verify, reject, or revise your prior reasoning about the options. Then continue analyzing the options until you're confident in your answer.

At the end of your reasoning, give your final answer in the following format:
the correct answer is: A, B, C, D, etc. (only the letter corresponding to the correct option)."""

MCQ_COT = """You are solving a multiple-choice question. Think step by step and use careful reasoning.

For each question, **analyze all options one by one**. For each option:
- Consider its meaning and implications.
- Evaluate whether it is correct or incorrect, and **explain why**.
- Eliminate incorrect options with clear, logical reasoning.

After analyzing all options, compare the remaining ones and choose the best answer.

At the end of your reasoning, give your final answer in the following format:
the correct answer is: A, B, C, D, etc. (only the letter corresponding to the correct option)."""

MATH_RETRIEVAL = """You are solving a math problem. Think step by step to solve it.

The reasoning process includes detailed considerations such as analyzing questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of current steps, refining any errors, and revisiting previous steps.

During your reasoning, if you're unsure about a factual concept — such as a definition, formula, theorem, or mathematical constant — you may issue a **search query** to clarify it.

Format your query using the following template (each query must target only one fact):

<|begin_of_query|> your concise query (less than 20 words) <|end_of_query|>

✅ Examples:
<|begin_of_query|> Definition of Möbius function <|end_of_query|>
<|begin_of_query|> Formula for variance of Bernoulli distribution <|end_of_query|>

❌ Do NOT query for reasoning-related content like:
- Whether a solution approach is valid
- How to compute a specific value
- Multi-step deductions or conclusions

You may issue at most **four** search queries per problem — use them wisely.

When documents are returned in this format:
<|begin_of_documents|>
... (search results here)
<|end_of_documents|>

Use the evidence to confirm or revise your reasoning. Then continue analyzing the question until you're confident in the answer.

At the end of your reasoning, give your final answer in the following format:
\\boxed{YOUR_ANSWER}"""

# Typos and trailing spaces kept as in the UR² code (seeds §A2.2 d).
MATH_COT = ("You are sovling a math problem. Think step by step to solve it. \n\n"
            "The reasoning process includs detailed considerations such as analyzing questions, "
            "summarizing relevant findings, brainstorming new ideas, verifying the accuracy of "
            "current steps, refining any errors, and revisiting previous steps.\n\n"
            "At the end of your reasoning, give your final answer in the following format:  \n"
            "\\boxed{YOUR_ANSWER}")

QA_RETRIEVAL = """You are solving a factual open-domain question from a Knowledge Question Answering (KQA) task. The question requires step-by-step reasoning over real-world knowledge to identify a specific, factually correct answer.

Carefully analyze the question to understand the key entities, relationships, and constraints involved. Retrieve and consider relevant factual knowledge, and reason logically to identify the most accurate answer. 

During your reasoning, if you're unsure about any fact, you may issue a **search query** like this:  
<|begin_of_query|> your concise query (less than 20 words) <|end_of_query|>

* You can issue **multiple queries** at different steps in your reasoning.
* **Each query must target only one fact or statement**. Do not combine multiple ideas in a single query.
  * ✅ Example:
    * <|begin_of_query|> When did Einstein move to the United States? <|end_of_query|>
    * <|begin_of_query|> Why did Einstein leave Germany? <|end_of_query|>
  * ❌ Do **not** combine them like this:
    * <|begin_of_query|> When did Einstein move to the US and why did he leave Germany? <|end_of_query|>
* You may issue **at most five queries** in total — use them wisely.
Once documents are returned in this format:  
<|begin_of_documents|> 
... (search results here)  
<|end_of_documents|>

Use the evidence to confirm or revise your reasoning. Then continue analyzing the question until you're confident in the answer.

At the end of your reasoning, give your final answer in the following format:  
\\boxed{YOUR_ANSWER}"""

# Paper D.4 CoT prompt for open-domain QA (a user message, no system instruction).
QA_COT_USER = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."

# Compact instructions for a policy trained from scratch on the synthetic world (it never read
# English, and 1000 prompt tokens would dominate a CPU run; cf. the world protocol): the same
# choices (search or not, the answer format per task) in a line each.
COMPACT = {
    ("qa", True): "Search with <|begin_of_query|> query <|end_of_query|>. Answer \\boxed{answer}.",
    ("qa", False): "Answer \\boxed{answer}.",
    ("math", True): ("Math. Search with <|begin_of_query|> query <|end_of_query|>. Answer "
                     "\\boxed{answer}."),
    ("math", False): "Math. Answer \\boxed{answer}.",
    ("mcq", True): ("Choose. Search with <|begin_of_query|> query <|end_of_query|>. Answer: the "
                    "correct answer is: X."),
    ("mcq", False): "Choose. Answer: the correct answer is: X.",
}
PROMPTS = ("paper", "compact")

FALLBACK = ("This query requires design, computation, or complex reasoning, which exceeds the "
            "capabilities of a search engine. Please input another query or proceed with direct "
            "reasoning.")
FALLBACK_NOTICE = ("It seems that this query exceeds the capabilities of the retrieval system. We "
                   "may consider rephrasing it into a more fact-based and searchable question that "
                   "does not require complex reasoning, or proceed with direct reasoning based on "
                   "prior knowledge.")

_LETTERS = "ABCDEFGHIJ"


def boxed_contents(text: str) -> list[str]:
  """Every `\\boxed{...}` with balanced braces, in order (seeds §A3.1 [D])."""
  out, i = [], 0
  while True:
    i = text.find("\\boxed{", i)
    if i < 0:
      return out
    j, depth = i + len("\\boxed{"), 1
    while j < len(text) and depth:
      depth += {"{": 1, "}": -1}.get(text[j], 0)
      j += 1
    if depth:
      return out            # unclosed: not an answer
    out.append(text[i + len("\\boxed{"):j - 1])
    i = j


def extract_answer(text: str) -> str:
  """UR²'s `pred`: the last of boxed + `<answer>` + "the correct answer is X" matches, in that
  pattern order (so a letter answer beats a boxed one, as in the code)."""
  cands = boxed_contents(text)
  cands += re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL | re.IGNORECASE)
  cands += re.findall(r"[Tt]he correct answer is:?\s*([A-Ja-j])", text, re.DOTALL | re.IGNORECASE)
  return cands[-1].strip() if cands else ""


def ur2_documents(hits: Sequence) -> str:
  """UR² `DOC`: each item minus a leading `^\\d+\\s+`, stripped, newline-terminated; "None" if empty."""
  docs = "".join(re.sub(r"^\d+\s+", "", hit_contents(h)).strip() + "\n" for h in hits)
  return docs if docs else "None"


TASKS = ("qa", "math", "mcq")


def check_task(task: str, where: str = "UR2 task") -> str:
  if task not in TASKS:
    raise ValueError(f"{where} must be 'qa', 'math' or 'mcq', got {task!r}")
  return task


@registry.register("protocol")
@dataclasses.dataclass(frozen=True)
class UR2(Protocol):
  """UR²'s rollout: QA, multiple choice and math prompts, with or without retrieval per example.

  `task` is the default; an example's own `task` (`PromptInput.task`, from the record or its
  metadata) wins, so one run mixes math, QA and multiple choice.  `retrieval` per example picks
  the retrieval or the CoT prompt (UR²'s difficulty-aware task mixing)."""
  name = "ur2"
  task: str = "qa"                 # "qa" | "math" | "mcq"
  top_k: int = 10
  max_turns: int = 4
  final_turn: bool = True
  obs_max_tokens: Optional[int] = None
  prompts: str = "paper"           # "paper" (App. D.2, the code's CoT) | "compact" (the world)
  # Per task, the most tokens one turn may take (the code's vLLM max_tokens: QA 512, multiple
  # choice 1536, math 3072; seeds §A2.3); a task not named, or None, gets the sampler's
  # per-turn budget (`sampler.max_new_tokens`, which must hold the largest).
  turn_tokens: Optional[Mapping[str, int]] = None

  def __post_init__(self):
    super().__post_init__()
    check_task(self.task)
    if self.prompts not in PROMPTS:
      raise ValueError(f"UR2 prompts must be one of {PROMPTS}, got {self.prompts!r}")
    for task, n in dict(self.turn_tokens or {}).items():
      check_task(task, "protocol.turn_tokens key")
      if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"protocol.turn_tokens[{task!r}] must be a positive int, got {n!r}")

  def turn_budget(self, inp: PromptInput) -> Optional[int]:
    return dict(self.turn_tokens or {}).get(self.task_of(inp))

  def task_of(self, inp: PromptInput) -> str:
    return check_task(inp.task or self.task, f"question {inp.question[:60]!r}: task")

  def system_message(self, inp: PromptInput) -> Optional[str]:
    task = self.task_of(inp)
    if self.prompts == "compact":
      return COMPACT[task, inp.retrieval]
    if task == "mcq":
      return MCQ_RETRIEVAL if inp.retrieval else MCQ_COT
    if task == "math":
      return MATH_RETRIEVAL if inp.retrieval else MATH_COT
    return QA_RETRIEVAL if inp.retrieval else None

  def user_message(self, inp: PromptInput) -> str:
    task = self.task_of(inp)
    if task == "mcq":
      if not inp.options:
        raise ValueError(f"multiple-choice question has no options: {inp.question!r}")
      if len(inp.options) > len(_LETTERS):
        raise ValueError(f"at most {len(_LETTERS)} options, got {len(inp.options)}")
      opts = "\n".join(f"{_LETTERS[i]}. {o}" for i, o in enumerate(inp.options))
      return f"Question: {inp.question}\nOptions:\n{opts}"
    if task == "math" or self.prompts == "compact":
      return f"Question: {inp.question}"
    return inp.question if inp.retrieval else QA_COT_USER.format(question=inp.question)

  def retrieval_context(self, inp: PromptInput, response: str) -> dict:
    """What UR²'s summariser sees besides the query (seeds §A2.3 step 4): the example's task
    (corpus and prompt routing) and the reasoning so far, i.e. the response up to the last
    `<|begin_of_query|>`."""
    cut = response.rfind(BEGIN_QUERY)
    return {"tasks": self.task_of(inp), "prev_reasoning": response if cut < 0 else response[:cut]}

  @property
  def stop_sequences(self) -> tuple[str, ...]:
    return (END_QUERY,)

  def parse(self, text: str, *, final: bool) -> Action:
    e = text.find(END_QUERY)
    b = text.rfind(BEGIN_QUERY, 0, e) if e >= 0 else -1
    if b >= 0:
      raw = text[b + len(BEGIN_QUERY):e]
      query = " ".join(raw.replace('"', "").split())
      keep = e + len(END_QUERY)
      if final:
        return Action(Kind.END, query=query, keep=keep, reason="query_in_final_turn")
      if not query:
        return Action(Kind.END, keep=keep, reason="empty_query")
      return Action(Kind.SEARCH, query=query, keep=keep, all_queries=(query,))
    answer = extract_answer(text)
    if answer:
      return Action(Kind.ANSWER, answer=answer)
    return Action(Kind.END, reason="no_answer")

  def format_documents(self, hits: Sequence) -> str:
    return ur2_documents(hits)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    # Byte layout of the code's context update.  Deviations (seeds §A2.4/§A2.3 [D]): the "\n\n"
    # before the documents tag and the fallback notice are environment text here, so masked;
    # the code trains on both.  `<|end_of_query|>` is the policy's own stop string (trained).
    docs = self.format_documents(hits)
    segs = [Segment(f"\n\n{BEGIN_DOCS}\n", Source.ENV), self.retrieved_segment(docs),
            Segment(f"{END_DOCS}\n\n", Source.ENV)]
    if docs.strip() == FALLBACK:
      segs.append(Segment(FALLBACK_NOTICE, Source.ENV))
    return segs

  def invalid_observation(self) -> list[Segment]:
    return []

  def annotate(self, row) -> dict:
    """`fallbacks`: searches answered with the fallback sentence (P_fallback counts them)."""
    fallbacks = sum(1 for docs in row.doc_texts if ur2_documents(docs).strip() == FALLBACK)
    return {"fallbacks": fallbacks}
