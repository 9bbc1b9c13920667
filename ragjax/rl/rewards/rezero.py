"""ReZero's six reward functions (Dao & Le 2025; seeds_ur2_rezero.md §B3), on the chat record.

The ReZero protocol records `messages`: the chat after the prompt (assistant contents and the
`<information>` user messages).  The code's weights are [4, 2, 1, 1, 1, 1] in the order

  rezero_correctness   judge says the final answer is right           {0, 1}
  rezero_format        the last assistant message is well formed      {0, 1}
  rezero_retry         pays for searching, only if the chat ends in an answer   [0, 0.95]
  rezero_em_chunk      the gold chunk was shown in an information message       {0, 1}
  rezero_strategy      think-then-search, information-based refinement          [0, 1]
  rezero_diversity     distinct search queries                                  [0, 1]

and the configs name them with those weights (`rl.rewards`); the paper's baseline drops
`rezero_retry`.  The code's quirks are kept where the spec lists them (format checks only the
last message; the "after information" flag is never reset; retry is not conditional on
correctness).  Decisions the spec leaves to us ([D]): the judge reads the `<answer>` content
only (`judge_input="answer"`; "message" gives it the whole last message as the code did);
`retry_counting="after_first"` is the paper's reading; a record without the gold chunk's text
uses its last supporting passage, matched by id among the shown documents.
"""

from __future__ import annotations

import difflib
import itertools
import re
import string
from typing import Mapping, Optional, Sequence

from ragjax import registry
from ragjax.rl.rewards.context import RewardContext, batched_reward

ANSWER = re.compile(r"<answer>[\s\S]*?</answer>")
ANSWER_CONTENT = re.compile(r"<answer>([\s\S]*?)</answer>")
SEARCH = re.compile(r"<search>[\s\S]*?</search>")
INFORMATION = re.compile(r"<information>[\s\S]*?</information>")
THINK = re.compile(r"<think>[\s\S]*?</think>")
# bold / italic markers glued to a tag (`**<think>**`, `*<answer>*`, `_<search>_`)
WRAPPED_TAG = re.compile(r"[*_]+\s*</?(?:think|answer|search)>|</?(?:think|answer|search)>\s*[*_]+")
INFO_TAG = re.compile(r"</?info", re.IGNORECASE)
TAG_FREE_THINK = re.compile(r"<think>([^<>]+)</think>")
TAG_FREE_SEARCH = re.compile(r"<search>([^<>]+)</search>")
TAG_FREE_INFO = re.compile(r"<information>[^<>]+</information>")
ANALYSIS = re.compile(r"\b(based|according|from|results?|found|shows?|provided|information)\b",
                      re.IGNORECASE)


# --- the chat record --------------------------------------------------------------------------
def messages(ctx: RewardContext) -> list[dict]:
  msgs = ctx.row.extra.get("messages")
  if msgs is None:
    raise KeyError("the row record has no 'messages' (ReZero's rewards read the chat; use "
                   "protocol.name='rezero')")
  return list(msgs)


def assistant_texts(msgs: Sequence[Mapping]) -> list[str]:
  return [m["content"] for m in msgs if m["role"] == "assistant"]


def last_assistant(msgs: Sequence[Mapping]) -> Optional[str]:
  texts = assistant_texts(msgs)
  return texts[-1] if texts else None


def judge_answer(msgs: Sequence[Mapping], judge_input: str = "answer") -> Optional[str]:
  """What the judge grades, or None when the chat fails checks (a)-(c): the last message is
  the assistant's, holds an `<answer>` block and no `<search>` / `<information>` block."""
  if not msgs or msgs[-1]["role"] != "assistant":
    return None
  text = msgs[-1]["content"]
  if not ANSWER.search(text) or SEARCH.search(text) or INFORMATION.search(text):
    return None
  if judge_input == "message":
    return text
  if judge_input != "answer":
    raise ValueError(f"judge_input must be 'answer' or 'message', got {judge_input!r}")
  return ANSWER_CONTENT.findall(text)[-1].strip()


# --- 1. correctness ---------------------------------------------------------------------------
_JUDGES: dict = {}


def _judge(chat):
  from ragjax.services.judge import TemplateJudge
  key = id(chat)
  if key not in _JUDGES or _JUDGES[key][0] is not chat:
    _JUDGES[key] = (chat, TemplateJudge(chat, "rezero_correctness"))
  return _JUDGES[key][1]


def check_judge_room(judge, records: Sequence[Mapping], turn_tokens: int,
                     judge_input: str = "answer") -> None:
  """Refuse, before training, a judge whose prompt limit a policy turn can overflow.

  The judge quotes one assistant turn (its `<answer>` content, or the whole message), which is
  at most `turn_tokens` (`sampler.max_new_tokens`) long; the rest of its prompt is the template
  with the question and gold answer.  A judge that counts tokens (`encode` and
  `max_prompt_tokens`, as `LocalChatModel`) is checked against the longest question and gold
  answer in `records`; a remote judge keeps its own limit.  Without this check the first long
  answer stops the run mid-step (the fuzz tool found it with a 3,400-token answer)."""
  limit, encode = getattr(judge, "max_prompt_tokens", None), getattr(judge, "encode", None)
  if limit is None or encode is None or not records:
    return
  def longest(key):
    vals = [str(v[0] if isinstance(v, (list, tuple)) and v else v)
            for r in records for v in [r.get(key, "")]]
    return max(vals, key=len)
  from ragjax.services.templates import get_template
  rendered = get_template("rezero_correctness").render(question=longest("question"),
                                           answer=longest("golden_answers"), student_answer="")
  fixed = len(encode(rendered))
  # A turn's text re-tokenised after the template can merge differently at its edges: 8 spare.
  need = fixed + turn_tokens + 8
  if need > limit:
    raise ValueError(
        f"judge.max_prompt_tokens={limit} is too small for rezero_correctness "
        f"(judge_input={judge_input!r}): the template with the longest question takes {fixed} "
        f"tokens and a policy turn up to sampler.max_new_tokens={turn_tokens}, so a prompt can "
        f"reach {need}; raise judge.max_prompt_tokens or lower sampler.max_new_tokens")


@registry.register("reward", "rezero_correctness")
@batched_reward
def rezero_correctness(ctxs: Sequence[RewardContext], judge_input: str = "answer") -> list[float]:
  """1 iff checks (a)-(c) pass and the judge's reply contains "yes" (one judge request for the
  whole batch; the judge is the `judge` service, ReZero's frozen base model)."""
  asks, where = [], []
  for i, ctx in enumerate(ctxs):
    student = judge_answer(messages(ctx), judge_input)
    if student is None:
      continue
    asks.append({"question": str(ctx.example["question"]),
                 "answer": str(ctx.golden_answers[0] if not isinstance(ctx.golden_answers, str)
                               else ctx.golden_answers),
                 "student_answer": student})
    where.append(i)
  out = [0.0] * len(ctxs)
  if asks:
    for i, yes in zip(where, _judge(ctxs[0].service("judge"))(asks)):
      out[i] = float(bool(yes))
  return out


# --- 2. format --------------------------------------------------------------------------------
def format_ok(text: Optional[str]) -> bool:
  """The code's checks on one assistant message (see the module docstring of §B3.2)."""
  if text is None or WRAPPED_TAG.search(text) or INFO_TAG.search(text):
    return False
  if not THINK.search(text):
    return False
  answers, searches = len(ANSWER.findall(text)), len(SEARCH.findall(text))
  if not ((answers == 1) ^ (searches >= 1)) or (answers and searches):
    return False
  first_action = min(m.start() for m in itertools.chain(ANSWER.finditer(text),
                                                        SEARCH.finditer(text)))
  if text.rfind("</think>") > first_action:
    return False
  return text.strip().endswith(("</search>", "</answer>"))


@registry.register("reward", "rezero_format")
def rezero_format(ctx: RewardContext) -> float:
  """1 iff the last assistant message is well formed (intermediate turns are not checked)."""
  return float(format_ok(last_assistant(messages(ctx))))


# --- 3. retry ---------------------------------------------------------------------------------
RETRY_COUNTING = ("all_searches", "after_first")


def check_retry_counting(retry_counting: str) -> None:
  if retry_counting not in RETRY_COUNTING:
    raise ValueError(f"retry_counting must be one of {RETRY_COUNTING}, got {retry_counting!r}")


def retry_value(msgs: Sequence[Mapping], retry_counting: str = "all_searches") -> float:
  check_retry_counting(retry_counting)
  last = last_assistant(msgs)
  if last is None or not ANSWER.search(last):
    return 0.0
  return retry_score([len(SEARCH.findall(t)) for t in assistant_texts(msgs)], retry_counting)


def retry_score(counts: Sequence[int], retry_counting: str = "all_searches") -> float:
  """ReZero's retry value of an answered trajectory whose messages (turns) held `counts`
  searches: min(1, 0.2 + 0.15 min(n, 5)) for n searches (n - 1 with "after_first", 0 when
  n <= 0), halved when one message holds several."""
  check_retry_counting(retry_counting)
  n = sum(counts) - (1 if retry_counting == "after_first" else 0)
  if n <= 0:
    return 0.0
  r = min(1.0, 0.2 + 0.15 * min(n, 5))
  if any(c > 1 for c in counts):
    r *= 0.5
  return round(r, 3)


@registry.register("reward", "rezero_retry")
def rezero_retry(ctx: RewardContext, retry_counting: str = "all_searches") -> float:
  """min(1, 0.2 + 0.15 min(n, 5)) for n searches (n - 1 with "after_first"), halved if one
  message holds several searches, 0 unless the last assistant message has an answer."""
  return retry_value(messages(ctx), retry_counting)


@registry.register("reward", "search_retry")
def search_retry(ctx: RewardContext, retry_counting: str = "after_first") -> float:
  """ReZero's retry reward on any tag protocol: its value for the row's searches (one per turn),
  0 unless the row answered; for combining ReZero with other methods' protocols."""
  check_retry_counting(retry_counting)
  if ctx.answer is None:
    return 0.0
  return retry_score([1] * int(ctx.row.num_searches), retry_counting)


# --- 4. em_chunk ------------------------------------------------------------------------------
def gold_chunk(example: Mapping) -> tuple[Optional[str], Optional[str]]:
  """(chunk text, chunk passage id): the record's `chunk_content` / last `supporting_paragraphs`
  (ReZero's data), else its last supporting passage id."""
  meta = example.get("metadata") or {}
  for source in (example, meta):
    if source.get("chunk_content"):
      return str(source["chunk_content"]), None
    paras = source.get("supporting_paragraphs")
    if paras:
      return str(paras[-1]), None
  ids = example.get("supporting_ids") or meta.get("supporting_ids")
  if ids:
    return None, str(ids[-1])
  raise KeyError(f"record {example.get('id', '?')!r} names no gold chunk (chunk_content, "
                 f"supporting_paragraphs or supporting_ids)")


@registry.register("reward", "rezero_em_chunk")
def rezero_em_chunk(ctx: RewardContext) -> float:
  """1 iff the gold chunk is a substring of an information message (or, by id, was shown)."""
  text, pid = gold_chunk(ctx.example)
  if text is not None:
    return float(any(m["role"] == "user" and m["content"].startswith("<information>")
                     and text in m["content"] for m in messages(ctx)))
  shown = {i for ids in ctx.row.doc_ids for i in ids}
  return float(pid in shown)


# --- 5. search strategy -----------------------------------------------------------------------
def _keyword_think(text: str) -> bool:
  return any(ANALYSIS.search(t) for t in TAG_FREE_THINK.findall(text))


def strategy_value(msgs: Sequence[Mapping]) -> float:
  score = 0.0
  asst = assistant_texts(msgs)
  if any(TAG_FREE_THINK.search(t) and TAG_FREE_SEARCH.search(t) for t in asst):
    score += 0.2
  after_info, refine_search, refine_kw = False, 0, 0
  for m in msgs:
    if m["role"] == "user" and TAG_FREE_INFO.search(m["content"]):
      after_info = True                # never reset by later assistant messages (code quirk)
    elif m["role"] == "assistant" and after_info:
      t = m["content"]
      refine_search += bool(TAG_FREE_THINK.search(t) and TAG_FREE_SEARCH.search(t))
      refine_kw += _keyword_think(t)
  score += min(0.4, 0.2 * min(refine_search, refine_kw))
  if any("<answer>" in t and _keyword_think(t) for t in asst):
    score += 0.4
  return round(score, 10)


@registry.register("reward", "rezero_strategy")
def rezero_strategy(ctx: RewardContext) -> float:
  """0.2 think+search in one message; 0.2 per information-based refinement (at most 0.4);
  0.4 for an answer whose thinking cites what was found."""
  return strategy_value(messages(ctx))


# --- 6. search diversity ----------------------------------------------------------------------
OPERATOR = re.compile(r'site:\S+|filetype:\S+|"[^"]*"| OR | AND |(?:(?<=\s)|^)-\w+')
_PUNCT = str.maketrans("", "", string.punctuation)


def split_query(query: str) -> tuple[str, tuple[str, ...]]:
  """(normalised base, operators): operators extracted, the rest lower-cased, punctuation
  removed, spaces collapsed."""
  ops = tuple(o.strip() for o in OPERATOR.findall(query))
  base = OPERATOR.sub(" ", query).lower().translate(_PUNCT)
  return " ".join(base.split()), ops


def diversity_value(queries: Sequence[str]) -> float:
  if not queries:
    return 0.0
  if len(queries) == 1:
    return 0.2
  parts = [split_query(q) for q in queries]
  bases = [b for b, _ in parts]
  sims, near = [], 0
  for (b1, o1), (b2, o2) in itertools.combinations(parts, 2):
    s = difflib.SequenceMatcher(None, b1, b2).ratio()
    near += 0.8 < s < 1.0
    if sorted(o1) != sorted(o2):
      s *= max(0.3, 1.0 - 0.2 * len(set(o1) ^ set(o2)))
    sims.append(s)
  diversity = 1.0 - sum(sims) / len(sims)
  unique = len(set(bases))
  distinct_ops = {o for _, ops in parts for o in ops}
  with_ops = sum(bool(ops) for _, ops in parts) / len(parts)
  base = min(0.4, 0.2 * unique)
  op_bonus = min(0.15, 0.05 * len(distinct_ops)) + 0.05 * with_ops
  sim_pen = 0.1 * near * (0.5 if len(distinct_ops) >= 2 else 1.0)
  dup_pen = 0.2 * (len(bases) - unique)
  return min(1.0, max(0.0, base + 0.4 * diversity + op_bonus - sim_pen - dup_pen))


@registry.register("reward", "rezero_diversity")
def rezero_diversity(ctx: RewardContext) -> float:
  """Rewards distinct queries (similarity by difflib's ratio), penalises near-duplicates."""
  queries = [q for t in assistant_texts(messages(ctx)) for q in TAG_FREE_SEARCH.findall(t)]
  return diversity_value(queries)
