"""R3-RAG's cold start: teacher trajectories (Algorithm 1), rejection sampling, best-of-N, and
the step samples SFT trains on (Algorithm 2).  seeds_rex_autorefine_r3.md §3.5.

    summary = generate_cold_start(records, teacher, retriever, out_dir, ColdStartConfig(),
                                  judge=judge)
    rows_t, rows_l, stats = sft_step_samples(engine, read_trajectories(out_dir), ...)

**Generation.**  For each question, `attempts` trajectories are sampled from the teacher (any
`ChatModel`: an OpenAI-compatible endpoint such as DeepSeek-V3, a checkpoint in this process,
or the synthetic world's scripted teacher): the first at `first_temperature` (0.0), the others at
`temperature` (0.9), as the code does.  Step j asks the teacher with the paper's Figure 6 / 7
prompt (`r3_teacher_first` / `r3_teacher_next`, the earlier steps and their documents in it);
a reply with a query retrieves `top_k` passages not seen earlier in the trajectory; a reply
with an answer ends it; a reply with neither is asked again up to `format_retries` times, then
the attempt fails on format; no answer after `max_steps` steps fails too.  Answers are checked
with Acc = Acc_match OR Acc_model (the run's judge; `ragjax.services.r3_judges`).

**Selection.**  Rejection sampling keeps questions with a correct attempt.  `select =
"best_of_n"` (the paper) samples all attempts and keeps the correct one with the fewest steps,
then the fewest analysis words ("the most concise reasoning steps"), then the earliest;
`"first"` (the released code) stops at the first correct attempt.  A question whose text
(case and spacing folded) was already processed is rejected as a duplicate.

**Output** (`out_dir`): `trajectories.jsonl`, one FlashRAG question record per kept question
(readable with `ragjax.data.readers.read_examples`) with the trajectory in
`metadata.r3_trajectory` (`steps`: analysis, query, doc_ids, documents | analysis, answer);
`rejected.jsonl` (id, question, reason: incorrect | no_answer | format | duplicate, the outcome
of every attempt); `summary.json` (kept, rejected by reason, attempts, teacher requests).
Questions are processed in chunks and each chunk's lines are appended and synced before the
next starts, so a killed run resumes where it stopped (a torn last line is dropped).

**SFT samples.**  Each kept trajectory becomes its step texts (`Step j:\\nThe problem
analysis: ...`, Format(s_j)), forced through the real rollout engine (`teacher_traces`), so
every (input = question + earlier steps + documents, output = step j) sample is laid out and
labelled exactly as the RL rollouts lay out theirs.  The documents come from the retriever
again; a step whose passages differ from the stored ones is counted (`doc_mismatches`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Mapping, Optional, Sequence

from ragjax.data.schema import Example
from ragjax.rollout.protocols.base import Kind, hit_contents, hit_id
from ragjax.rollout.protocols.r3_rag import ANALYSIS, ANSWER, QUERY, parse_r3_step, r3_step_fields
from ragjax.services.r3_judges import answer_correct
from ragjax.services.templates import render_r3_teacher
from ragjax.typed_config import write_json_atomic

TRAJECTORIES = "trajectories.jsonl"
REJECTED = "rejected.jsonl"
SUMMARY = "summary.json"
REASONS = ("incorrect", "no_answer", "format", "duplicate")
_RETRY_SEED = 7919            # a regenerated step asks again with seed + k * this


@dataclasses.dataclass(frozen=True)
class ColdStartConfig:
  """Algorithm 1 and its selection; defaults are the paper's and the code's (§3.5)."""
  attempts: int = 7                   # samples per question (best-of-N)
  first_temperature: float = 0.0
  temperature: float = 0.9
  max_steps: int = 5                  # Algorithm 1 MAX_ITERATION
  top_k: int = 3                      # passages per retrieval, unseen in the trajectory
  max_tokens: int = 256               # teacher reply budget
  format_retries: int = 2             # a malformed step is regenerated this many times
  select: str = "best_of_n"           # best_of_n (paper) | first (code)
  answer_judge: bool = True           # Acc_model as well as Acc_match
  chunk: int = 64                     # questions per request batch (and per durable write)
  max_questions: int = 0              # 0 = all
  seed: int = 0

  def __post_init__(self):
    if self.select not in ("best_of_n", "first"):
      raise ValueError(f"cold_start.select must be 'best_of_n' or 'first', got {self.select!r}")
    for name in ("attempts", "max_steps", "top_k", "max_tokens", "chunk"):
      if getattr(self, name) < 1:
        raise ValueError(f"cold_start.{name} must be >= 1, got {getattr(self, name)}")
    if self.format_retries < 0 or self.max_questions < 0:
      raise ValueError("cold_start.format_retries and cold_start.max_questions must be >= 0")

  def attempt_temperature(self, a: int) -> float:
    return self.first_temperature if a == 0 else self.temperature

  def attempt_seed(self, a: int) -> int:
    return self.seed * 1_000_003 + a


@dataclasses.dataclass
class _Attempt:
  question: int                       # index in the chunk
  index: int
  steps: list = dataclasses.field(default_factory=list)
  seen: list = dataclasses.field(default_factory=list)
  answer: Optional[str] = None
  status: str = "running"             # running | correct | incorrect | no_answer | format

  def signature(self) -> tuple:
    return tuple((s["analysis"], s.get("query"), s.get("answer")) for s in self.steps)

  def words(self) -> int:
    return sum(len(s["analysis"].split()) for s in self.steps)


def question_key(question: str) -> str:
  return " ".join(str(question).lower().split())


# --- files ------------------------------------------------------------------------------------
def _read_lines(path: str) -> list[dict]:
  """The records of a jsonl file we append to; a torn last line (a kill mid-write) is cut off."""
  if not os.path.exists(path):
    return []
  with open(path, "rb") as f:
    data = f.read()
  good = data[:data.rfind(b"\n") + 1]
  if len(good) != len(data):
    with open(path, "r+b") as f:
      f.truncate(len(good))
  out = []
  for i, line in enumerate(good.decode("utf-8").splitlines()):
    if line.strip():
      try:
        out.append(json.loads(line))
      except ValueError as e:
        raise ValueError(f"{path}:{i + 1}: not a JSON record ({e}); the file is not one this "
                         f"run wrote") from None
  return out


def _append(path: str, records: Sequence[dict]) -> None:
  if not records:
    return
  with open(path, "a", encoding="utf-8", newline="\n") as f:
    for rec in records:
      f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_trajectories(out_dir: str) -> list[dict]:
  """The kept records (plain dicts with `metadata.r3_trajectory`), via the data package."""
  from ragjax.data.readers import as_record, read_examples
  path = os.path.join(out_dir, TRAJECTORIES)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no cold-start trajectories; run the data stage first "
                            f"(--config.stage=data)")
  return [as_record(e) for e in read_examples(path, "flashrag")]


def summarise(out_dir: str) -> dict:
  kept, rejected = _read_lines(os.path.join(out_dir, TRAJECTORIES)), _read_lines(
      os.path.join(out_dir, REJECTED))
  reasons = {r: 0 for r in REASONS}
  for rec in rejected:
    reasons[rec["reason"]] = reasons.get(rec["reason"], 0) + 1
  steps = [len(k["metadata"]["r3_trajectory"]["steps"]) for k in kept]
  return {"questions": len(kept) + len(rejected), "kept": len(kept), "rejected": reasons,
          "mean_steps_kept": sum(steps) / len(steps) if steps else 0.0}


def _kept_record(rec: Mapping, trajectory: dict) -> dict:
  ex = Example(id=str(rec["id"]), question=str(rec["question"]),
               golden_answers=tuple(rec["golden_answers"]),
               data_source=str(rec.get("data_source") or "r3_cold_start"),
               options=tuple(rec.get("options") or ()),
               supporting_ids=tuple(rec.get("supporting_ids") or ()),
               supporting_titles=tuple(rec.get("supporting_titles") or ()),
               metadata={**dict(rec.get("metadata") or {}), "r3_trajectory": trajectory})
  return ex.to_flashrag()


# --- generation -------------------------------------------------------------------------------
class _Generator:
  def __init__(self, teacher, retriever, cfg: ColdStartConfig, judge):
    self.teacher, self.retriever, self.cfg, self.judge = teacher, retriever, cfg, judge
    self.requests = 0

  def _ask(self, questions: Sequence[str], attempts: Sequence[_Attempt], retry: int) -> list[str]:
    """One teacher call per attempt index (its own temperature and seed; a regeneration
    `retry` > 0 shifts the seed) over the attempts."""
    replies = [""] * len(attempts)
    by_index: dict = {}
    for i, at in enumerate(attempts):
      by_index.setdefault(at.index, []).append(i)
    for a, idx in sorted(by_index.items()):
      convs = [render_r3_teacher(questions[attempts[i].question],
                                 [s for s in attempts[i].steps if "query" in s]) for i in idx]
      self.requests += len(convs)
      out = self.teacher.complete(convs, max_tokens=self.cfg.max_tokens,
                                  temperature=self.cfg.attempt_temperature(a),
                                  seed=self.cfg.attempt_seed(a) + _RETRY_SEED * retry)
      for i, text in zip(idx, out):
        replies[i] = text
    return replies

  def _step(self, questions: Sequence[str], live: Sequence[_Attempt], last: bool) -> None:
    actions = [None] * len(live)
    todo = list(range(len(live)))
    for retry in range(self.cfg.format_retries + 1):
      replies = self._ask(questions, [live[i] for i in todo], retry)
      again = []
      for i, text in zip(todo, replies):
        act = parse_r3_step(text, final=False)
        if act.kind in (Kind.SEARCH, Kind.ANSWER):
          actions[i] = (act, text)
        else:
          again.append(i)
      todo = again
      if not todo:
        break
    for i in todo:
      live[i].status = "format"
    searching = [i for i, a in enumerate(actions) if a is not None and a[0].kind == Kind.SEARCH]
    hits = []
    if searching:
      extra = max(len(live[i].seen) for i in searching)
      hits = self.retriever.search([actions[i][0].query for i in searching],
                                   self.cfg.top_k + extra)
    found = dict(zip(searching, hits))
    for i, at in enumerate(live):
      if actions[i] is None:
        continue
      act, text = actions[i]
      analysis = r3_step_fields(text)["analysis"]
      if act.kind == Kind.ANSWER:
        at.steps.append({"analysis": analysis, "answer": act.answer})
        at.answer, at.status = act.answer, "answered"
        continue
      fresh = [h for h in found[i] if hit_id(h) not in at.seen][:self.cfg.top_k]
      at.seen += [hit_id(h) for h in fresh]
      at.steps.append({"analysis": analysis, "query": act.query,
                       "doc_ids": [hit_id(h) for h in fresh],
                       "documents": "\n".join(hit_contents(h) for h in fresh)})
      if last:
        at.status = "no_answer"

  def run(self, chunk: Sequence[Mapping]) -> tuple[list[dict], list[dict]]:
    cfg = self.cfg
    questions = [str(r["question"]) for r in chunk]
    rounds = ([list(range(cfg.attempts))] if cfg.select == "best_of_n"
              else [[a] for a in range(cfg.attempts)])
    attempts: list[_Attempt] = []
    solved: set = set()
    for rnd in rounds:
      batch = [_Attempt(q, a) for q in range(len(chunk)) if q not in solved for a in rnd]
      for j in range(cfg.max_steps):
        live = [at for at in batch if at.status == "running"]
        if not live:
          break
        self._step(questions, live, last=j == cfg.max_steps - 1)
      answered = [at for at in batch if at.status == "answered"]
      ok, _ = answer_correct(self.judge, [
          (f"The question: {questions[at.question]}", at.answer,
           list(chunk[at.question]["golden_answers"])) for at in answered],
          use_model=cfg.answer_judge)
      for at, good in zip(answered, ok):
        at.status = "correct" if good else "incorrect"
        if good:
          solved.add(at.question)
      attempts += batch
    kept, rejected = [], []
    for q, rec in enumerate(chunk):
      mine = [at for at in attempts if at.question == q]
      outcomes = {s: sum(at.status == s for at in mine)
                  for s in ("correct", "incorrect", "no_answer", "format")}
      good = [at for at in mine if at.status == "correct"]
      if not good:
        reason = next(r for r in ("incorrect", "no_answer", "format") if outcomes[r]) \
            if any(outcomes.values()) else "format"
        rejected.append({"id": str(rec["id"]), "question": questions[q], "reason": reason,
                         "attempts": outcomes})
        continue
      best = min(good, key=lambda at: (len(at.steps), at.words(), at.index))
      kept.append(_kept_record(rec, {
          "steps": best.steps, "answer": best.answer, "attempt": best.index,
          "temperature": cfg.attempt_temperature(best.index), "attempts": len(mine),
          "correct_attempts": len(good),
          "distinct_correct": len({at.signature() for at in good})}))
    return kept, rejected


def generate_cold_start(records: Sequence[Mapping], teacher, retriever, out_dir: str,
                        cfg: ColdStartConfig = ColdStartConfig(), *, judge=None,
                        progress: bool = False,
                        on_chunk: Optional[Callable[[int], None]] = None) -> dict:
  """Runs (or resumes) the cold-start generation over `records` into `out_dir`; returns the
  summary (also written to `summary.json`).  `judge` scores answers that fail the string
  match (None: Acc_match only)."""
  import tqdm
  os.makedirs(out_dir, exist_ok=True)
  kept_path, rej_path = os.path.join(out_dir, TRAJECTORIES), os.path.join(out_dir, REJECTED)
  for path in (kept_path, rej_path):
    open(path, "a").close()
  done = _read_lines(kept_path) + _read_lines(rej_path)
  done_ids = {str(r["id"]) for r in done}
  seen = {question_key(r["question"]) for r in done}
  records = list(records)[:cfg.max_questions or None]
  todo, dups = [], []
  for rec in records:
    rid = str(rec["id"])
    if rid in done_ids:
      continue
    key = question_key(rec["question"])
    if key in seen:
      dups.append({"id": rid, "question": str(rec["question"]), "reason": "duplicate",
                   "attempts": {}})
      continue
    seen.add(key)
    todo.append(rec)
  _append(rej_path, dups)
  gen = _Generator(teacher, retriever, cfg, judge if cfg.answer_judge else None)
  for s in tqdm.trange(0, len(todo), cfg.chunk, disable=not progress, desc="cold start"):
    kept, rejected = gen.run(todo[s:s + cfg.chunk])
    _append(kept_path, kept)
    _append(rej_path, rejected)
    if on_chunk is not None:
      on_chunk(s // cfg.chunk)
  summary = {**summarise(out_dir), "teacher_requests_this_run": gen.requests}
  write_json_atomic(os.path.join(out_dir, SUMMARY), summary)
  return summary


# --- SFT samples ------------------------------------------------------------------------------
def step_texts(trajectory: Mapping) -> list[str]:
  """Format(s_j) of every step: `Step j:\\nThe problem analysis: ...\\nThe retrieval query:
  ...` or `... The final answer: ...`."""
  out = []
  for j, s in enumerate(trajectory["steps"], 1):
    tail = f"{QUERY} {s['query']}" if "query" in s else f"{ANSWER} {s['answer']}"
    out.append(f"Step {j}:\n{ANALYSIS} {s['analysis']}\n{tail}")
  return out


def sft_step_samples(engine, records: Sequence[Mapping], *, eos_text: str,
                     max_new_tokens: int, cache_length: int, chunk: int = 256, seed: int = 0):
  """(tokens, labels) of every step sample of the kept trajectories, forced through the real
  engine (see the module docstring), and counts {trajectories, samples, doc_mismatches}."""
  from ragjax.rl.teacher_traces import teacher_traces
  scripts = [[t + eos_text for t in step_texts(r["metadata"]["r3_trajectory"])] for r in records]
  stats = {"trajectories": len(records), "samples": 0, "doc_mismatches": 0, "incomplete": 0}

  def check(batch, offset):
    for row in batch.rows:
      stats["incomplete"] += row.stop_reason != "answer"
      stored = [s for s in records[offset + row.prompt_index]["metadata"]["r3_trajectory"]["steps"]
                if "query" in s]
      for turn, want in zip([t for t in row.turns if t.action == "search"], stored):
        stats["doc_mismatches"] += list(turn.doc_ids) != list(want["doc_ids"])

  rows_t, rows_l = teacher_traces(engine, list(records), scripts, max_new_tokens=max_new_tokens,
                                  cache_length=cache_length, chunk=chunk, seed=seed, steps=True,
                                  on_batch=check)
  stats["samples"] = len(rows_t)
  return rows_t, rows_l, stats
