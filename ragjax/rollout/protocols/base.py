"""What every search protocol provides, and the pieces several of them share.

A protocol is one tag grammar: its prompt, stop sequences, a parser that classifies a generated
turn, observation formatting, the invalid-action message and the final-turn rule.  It works on
text only; the renderer turns its text into ids and the engine drives the sampler.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Optional, Sequence

from ragjax.example_fields import record_field
from ragjax.rollout.labels import Source
from ragjax.rollout.segments import Segment


class Kind(enum.Enum):
  SEARCH = "search"    # retrieve for `query`, append the observation, continue
  ANSWER = "answer"    # the trajectory ends with `answer`
  INVALID = "invalid"  # append the invalid-action message, continue
  END = "end"          # the trajectory ends without an answer (malformed, no action, ...)


@dataclasses.dataclass(frozen=True)
class Action:
  """A parsed turn.  `keep` (characters of the turn text) cuts what follows the action."""
  kind: Kind
  query: Optional[str] = None
  answer: Optional[str] = None
  keep: Optional[int] = None
  reason: str = ""
  all_queries: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PromptInput:
  """One question; `options` for multiple choice, `retrieval=False` for UR²'s no-search prompt,
  `task` for protocols that prompt per task (UR²'s qa / math / mcq; "" = the protocol's own),
  `documents` for a protocol that reads passages retrieved before the rollout (retrieve-once
  RAG: the record's `documents` field, `ragjax.eval.systems.with_documents`)."""
  question: str
  options: tuple[str, ...] = ()
  retrieval: bool = True
  task: str = ""
  documents: str = ""


@dataclasses.dataclass(frozen=True)
class RestartStep:
  """An earlier turn of a restart-context row: its kept text, and its query and hits (None: the
  turn was an invalid action)."""
  text: str
  query: Optional[str] = None
  hits: tuple = ()


def as_prompt_input(x) -> PromptInput:
  if isinstance(x, PromptInput):
    return x
  if isinstance(x, str):
    return PromptInput(x)
  if isinstance(x, dict):
    if "question" not in x:
      raise ValueError(f"prompt record has no 'question' field: {sorted(x)}")
    retrieval = record_field(x, "retrieval", True)
    if not isinstance(retrieval, bool):
      raise ValueError(f"prompt record {x.get('id', '?')}: 'retrieval' must be true or false, "
                       f"got {retrieval!r}")
    task = record_field(x, "task", "") or ""
    if not isinstance(task, str):
      raise ValueError(f"prompt record {x.get('id', '?')}: 'task' must be a string, got {task!r}")
    documents = record_field(x, "documents", "") or ""
    if not isinstance(documents, str):
      raise ValueError(f"prompt record {x.get('id', '?')}: 'documents' must be a string, got "
                       f"{type(documents).__name__}")
    return PromptInput(str(x["question"]), tuple(x.get("options", ())), retrieval, task,
                       documents)
  raise TypeError(f"prompt must be a str, dict or PromptInput, got {type(x).__name__}")


def search_r1_question(question: str) -> str:
  """Search-R1 / AutoRefine data preprocessing: strip, then end with a question mark."""
  q = question.strip()
  return q if q.endswith("?") else q + "?"


def hit_contents(hit) -> str:
  """A hit's `"Title"\\ntext` contents (Search-R1 corpus form), from any retriever's hit (a
  plain string is its own contents: what a row record keeps)."""
  if isinstance(hit, str):
    return hit
  contents = getattr(hit, "contents", None)
  if contents is None and isinstance(hit, dict):
    contents = hit.get("contents")
    if contents is None and isinstance(hit.get("document"), dict):
      contents = hit["document"].get("contents")
  if contents is None:
    raise TypeError(f"retrieved hit has no 'contents': {hit!r}")
  return str(contents)


def hit_id(hit) -> str:
  hid = getattr(hit, "id", None)
  if hid is None and isinstance(hit, dict):
    hid = hit.get("id", (hit.get("document") or {}).get("id"))
  return "" if hid is None else str(hid)


def search_r1_docs(hits: Sequence) -> str:
  """Search-R1 `_passages2string`: `Doc {i}(Title: {first line}) {rest}\\n` per hit, from 1."""
  out = []
  for i, hit in enumerate(hits):
    title, _, text = hit_contents(hit).partition("\n")
    out.append(f"Doc {i + 1}(Title: {title}) {text}\n")
  return "".join(out)


_TAG_RE_CACHE: dict = {}


def first_tag_action(text: str, tags: Sequence[str]) -> Optional[re.Match]:
  """The first complete `<tag>...</tag>` among `tags` (Search-R1's `<(search|answer)>(.*?)</\\1>`)."""
  key = tuple(tags)
  if key not in _TAG_RE_CACHE:
    alt = "|".join(re.escape(t) for t in tags)
    _TAG_RE_CACHE[key] = re.compile(rf"<({alt})>(.*?)</\1>", re.DOTALL)
  return _TAG_RE_CACHE[key].search(text)


CONTEXTS = ("stream", "restart")


@dataclasses.dataclass(frozen=True)
class Protocol:
  """Base class; subclasses set the grammar.  All lengths are per the paper's code defaults.

  `max_turns` regular generations, then (if `final_turn`) one more with search disabled.
  `force_answer_text`, when set, is appended (ENV) before that final generation; the papers
  append nothing, so it defaults to None.

  `context`: "stream" keeps one growing sequence per row (observations appended, the sampler's
  cache extended); "restart" prompts every turn afresh, the earlier turns and their
  observations written into the prompt by `restart_history` (R3-RAG's fresh single-turn chat per
  step), so every turn is its own (context, turn) training sample (`RolloutBatch.samples`).
  """
  name = "base"
  observation_role = "inline"          # "inline" in the assistant stream, or "user" messages

  top_k: int = 3
  max_turns: int = 4
  final_turn: bool = True
  obs_max_tokens: Optional[int] = 500
  obs_max_chars: Optional[int] = None
  force_answer_text: Optional[str] = None
  max_response_tokens: Optional[int] = None   # total budget after the prompt (ReZero: 4096)
  dedup_docs: bool = False                    # skip passages already shown in this trajectory
  max_docs_per_trajectory: Optional[int] = None
  context: str = "stream"                     # "stream" | "restart" (see the class docstring)

  def __post_init__(self):
    if self.context not in CONTEXTS:
      raise ValueError(f"protocol.context must be one of {CONTEXTS}, got {self.context!r}")
    for name, least in (("top_k", 1), ("max_turns", 0), ("obs_max_tokens", 1),
                        ("obs_max_chars", 1), ("max_response_tokens", 1),
                        ("max_docs_per_trajectory", 0)):
      v = getattr(self, name)
      if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
        raise ValueError(f"protocol.{name} must be an integer >= {least}, got {v!r}")

  # --- prompt -------------------------------------------------------------------------------
  def system_message(self, inp: PromptInput) -> Optional[str]:
    return None

  def user_message(self, inp: PromptInput) -> str:
    raise NotImplementedError

  def plain_prompt(self, inp: PromptInput) -> str:
    """Base models: the instruction text with no chat framing."""
    system = self.system_message(inp)
    user = self.user_message(inp)
    return f"{system}\n\n{user}" if system else user

  def messages(self, inp: PromptInput) -> list[dict]:
    system = self.system_message(inp)
    head = [{"role": "system", "content": system}] if system is not None else []
    return head + [{"role": "user", "content": self.user_message(inp)}]

  # --- generation ---------------------------------------------------------------------------
  @property
  def stop_sequences(self) -> tuple[str, ...]:
    raise NotImplementedError

  def parse(self, text: str, *, final: bool) -> Action:
    raise NotImplementedError

  # --- observations -------------------------------------------------------------------------
  def format_documents(self, hits: Sequence) -> str:
    return search_r1_docs(hits)

  def truncate_chars(self, docs: str) -> str:
    return docs if self.obs_max_chars is None else docs[: self.obs_max_chars]

  def retrieved_segment(self, docs: str) -> Segment:
    return Segment(self.truncate_chars(docs), Source.RETRIEVED, self.obs_max_tokens)

  def observation(self, query: str, hits: Sequence) -> list[Segment]:
    raise NotImplementedError

  def invalid_observation(self) -> list[Segment]:
    raise NotImplementedError

  def restart_history(self, steps: Sequence["RestartStep"]) -> list[Segment]:
    """A restart context's text after the question: each earlier turn (its kept text, as
    PROMPT data) and its observation (`observation`, or the invalid-action message)."""
    out = []
    for st in steps:
      out.append(Segment(st.text, Source.PROMPT, plain=True))
      out += (self.observation(st.query, st.hits) if st.query is not None
              else self.invalid_observation())
    return out

  def retrieval_context(self, inp: PromptInput, response: str) -> Optional[dict]:
    """Per-query keyword arguments for a retriever with `search_with_context` (e.g. UR²'s
    summarising proxy: the example's task and the reasoning so far); `response` is the row's
    text after the prompt, up to and including the query.  None: plain `search`."""
    return None

  def turn_budget(self, inp: PromptInput) -> Optional[int]:
    """The most tokens one turn of this question may take (None: the sampler's per-turn
    budget).  The engine ends a longer turn there, exactly as a sampler with that budget would
    (UR²'s per-task budgets in one batch: QA 512, multiple choice 1,536, math 3,072)."""
    return None

  def final_turn_segments(self) -> list[Segment]:
    return [Segment(self.force_answer_text, Source.ENV)] if self.force_answer_text else []

  # --- the row's metadata record -----------------------------------------------------------
  def extract_answer(self, text: str) -> Optional[str]:
    """The answer a finished turn's text gives under this grammar (None: no answer).  The
    engine records exactly this parse as `RowMeta.answer`; rewards and metrics read that."""
    action = self.parse(text, final=True)
    return action.answer if action.kind == Kind.ANSWER else None

  def annotate(self, row) -> dict:
    """Protocol-specific fields of a finished row's record (`RowMeta.extra`), e.g. AutoRefine's
    refine text or UR²'s fallback count.  `row` is the `RowMeta` with turns filled in."""
    return {}
