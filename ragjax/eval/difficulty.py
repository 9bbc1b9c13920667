"""Question difficulty by rollouts (UR² §3.1.2, seeds_ur2_rezero.md §A4.4): s = the mean
answer score of N rollouts of a fixed model; easy s >= 0.8, medium >= 0.5, hard >= 0.2,
very_hard below (`ragjax.data.curriculum`).

    python -m ragjax.eval.difficulty --data train_math.jsonl --format math --task math \\
        --out math_scores.jsonl --n 20 (--chat-url http://127.0.0.1:8000/v1 | --checkpoint DIR)

The paper scores every question with 20 rollouts of Qwen2.5-7B-Instruct (whatever model is then
trained) and leaves the prompt, sampling and scorer unstated; [D] here: the task's CoT prompt
(no retrieval), temperature 1.0 and top_p 0.9 (the training settings), and the Stage-2 answer
score / 2 without the judge (math-verify, QA token F1, letter EM).  On the synthetic world,
whose QA cannot be answered without search, the engine path scores QA with the retrieval
prompt (`retrieval_tasks`).  Any `ChatModel` (an
OpenAI-compatible server such as vLLM, or a ragjax checkpoint in this process) or a rollout
engine over a policy (`score_with_engine`, what the UR² recipe uses on the synthetic world).

The output is jsonl, one line per question `{id, task, score, label, n, scores}`, appended as
each chunk finishes; a rerun skips the ids already there, so a killed run resumes.
`attach_scores` puts the scores into the records (`difficulty_score`) for the curriculum.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Callable, Mapping, Optional, Sequence

from ragjax.data.curriculum import label_of
from ragjax.example_fields import record_field
from ragjax.retrieval.records import iter_json_records, write_jsonl
from ragjax.rl.rewards.ur2 import answer_score
from ragjax.rollout.protocols.base import as_prompt_input
from ragjax.rollout.protocols.ur2 import UR2, check_task, extract_answer


def read_scores(path: str) -> dict[str, dict]:
  """{id: score line} of a score file (empty when it does not exist yet)."""
  if not os.path.exists(path):
    return {}
  out = {}
  for loc, rec in iter_json_records(path):
    if isinstance(rec, Exception):
      raise rec
    if not isinstance(rec.get("score"), (int, float)) or "id" not in rec:
      raise ValueError(f"{loc}: a score line needs 'id' and a numeric 'score'")
    out[str(rec["id"])] = rec
  return out


def cot_record(rec: Mapping, task: str, retrieval_tasks: Sequence[str] = ()) -> dict:
  """The record as scored: the task's CoT prompt (no retrieval), or the retrieval prompt for
  `retrieval_tasks` (the synthetic world's QA needs search to be answerable at all)."""
  task = record_field(rec, "task", "") or task
  return dict(rec, task=task, retrieval=task in retrieval_tasks)


def score_line(rec: Mapping, task: str, answers: Sequence[Optional[str]]) -> dict:
  scores = [answer_score(task, a or "", rec["golden_answers"]) / 2 for a in answers]
  s = sum(scores) / len(scores)
  return {"id": str(rec["id"]), "task": task, "score": s, "label": label_of(s),
          "n": len(scores), "scores": scores}


def _run(records: Sequence[Mapping], task: str, out_path: str, chunk: int,
         answer_fn: Callable[[list[dict], int], list[list[Optional[str]]]],
         progress: bool = False, retrieval_tasks: Sequence[str] = ()) -> dict[str, dict]:
  """Scores the records not yet in `out_path`, `chunk` at a time; returns every score line."""
  done = read_scores(out_path)
  ids = [str(r.get("id", "")) for r in records]
  if any(not i for i in ids) or len(set(ids)) != len(ids):
    raise ValueError("difficulty scoring needs a unique, non-empty id per record")
  todo = [cot_record(r, task, retrieval_tasks) for r in records if str(r["id"]) not in done]
  if os.path.dirname(out_path):
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
  for s in range(0, len(todo), chunk):
    part = todo[s:s + chunk]
    lines = [score_line(r, check_task(r["task"], f"record {r['id']}: task"), answers)
             for r, answers in zip(part, answer_fn(part, len(done)))]
    write_jsonl(out_path, lines, append=True)
    done.update({line["id"]: line for line in lines})
    if progress:
      print(f"[difficulty] {len(done)}/{len(records)} scored", flush=True)
  return done


def score_with_engine(engine, records: Sequence[Mapping], out_path: str, *, n: int,
                      chunk: int = 16, seed: int = 0, task: str = "qa",
                      retrieval_tasks: Sequence[str] = ()) -> dict[str, dict]:
  """N sampled rollouts per question through a rollout engine (its protocol must be UR²'s;
  its retriever serves `retrieval_tasks`, the CoT prompts do not search)."""
  def answers(part, offset):
    batch = engine.run(part, samples_per_prompt=n, seed=seed + offset)
    out = [[] for _ in part]
    for row in batch.rows:
      if row.clone_of is None:
        out[row.prompt_index].append(row.answer)
    return out
  return _run(records, task, out_path, chunk, answers, retrieval_tasks=retrieval_tasks)


def score_with_chat(chat, records: Sequence[Mapping], out_path: str, *, n: int,
                    max_tokens: int = 3072, temperature: float = 1.0, top_p: float = 0.9,
                    chunk: int = 16, task: str = "qa", protocol: Optional[UR2] = None,
                    progress: bool = False) -> dict[str, dict]:
  """N samples per question from a `ChatModel` with the protocol's CoT messages."""
  protocol = protocol or UR2(task=task)

  def answers(part, offset):
    convs = [protocol.messages(as_prompt_input(r)) for r in part for _ in range(n)]
    texts = chat.complete(convs, max_tokens=max_tokens, temperature=temperature, top_p=top_p)
    return [[extract_answer(t) for t in texts[i * n:(i + 1) * n]] for i in range(len(part))]
  return _run(records, task, out_path, chunk, answers, progress)


def attach_scores(records: Sequence[Mapping], scores: Mapping[str, Mapping]) -> list[dict]:
  """Copies of the records with `difficulty_score` from their score lines (by id); a record
  without one is an error naming it."""
  out = []
  for rec in records:
    line = scores.get(str(rec.get("id")))
    if line is None:
      raise ValueError(f"record {rec.get('id')} has no difficulty score (score it with "
                       f"`python -m ragjax.eval.difficulty`)")
    out.append(dict(rec, difficulty_score=float(line["score"])))
  return out


def main(argv=None):
  from ragjax.data.readers import READERS, read_examples, as_record
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--data", required=True, help="question file")
  ap.add_argument("--format", choices=sorted(READERS), default=None)
  ap.add_argument("--task", choices=("qa", "math", "mcq"), required=True,
                  help="the questions' task (a record's own task wins)")
  ap.add_argument("--out", required=True, help="score file (jsonl; resumed when it exists)")
  ap.add_argument("--n", type=_positive, default=20, help="rollouts per question (paper: 20)")
  model = ap.add_mutually_exclusive_group(required=True)
  model.add_argument("--chat-url", help="OpenAI-compatible base URL (e.g. vLLM's /v1)")
  model.add_argument("--checkpoint", help="HF directory: sample in this process")
  ap.add_argument("--chat-model", default=None, help="model name at --chat-url")
  ap.add_argument("--api-key-env", default=None)
  ap.add_argument("--temperature", type=float, default=1.0)
  ap.add_argument("--top-p", type=float, default=0.9)
  ap.add_argument("--max-tokens", type=_positive, default=3072,
                  help="per-rollout budget (UR²: math 3072, MCQ 1536, QA 512)")
  ap.add_argument("--chunk", type=_positive, default=16, help="questions per request batch")
  ap.add_argument("--limit", type=int, default=0, help="the first N questions only")
  args = ap.parse_args(argv)
  records = [as_record(e) for e in read_examples(args.data, args.format)]
  if args.limit:
    records = records[:args.limit]
  done = read_scores(args.out)
  if all(str(r.get("id")) in done for r in records):
    chat = None                   # resumed with nothing left: no model to load
  elif args.chat_url:
    from ragjax.services.http_client import OpenAIChatClient
    chat = OpenAIChatClient(args.chat_url, args.chat_model or "default",
                            api_key_env=args.api_key_env)
  else:
    from ragjax.parallel.backend import start
    from ragjax.services.local import LocalChatModel
    start("ragjax.eval.difficulty")     # backend line; no CPU fallback of a GPU / TPU run
    chat = LocalChatModel.from_checkpoint(args.checkpoint, max_new_tokens=args.max_tokens)
  if chat is not None:
    done = score_with_chat(chat, records, args.out, n=args.n, max_tokens=args.max_tokens,
                           temperature=args.temperature, top_p=args.top_p,
                           chunk=args.chunk, task=args.task, progress=True)
  labels: dict[str, int] = {}
  for r in records:
    label = done[str(r["id"])]["label"]
    labels[label] = labels.get(label, 0) + 1
  print(json.dumps({"scored": len(records), "labels": labels, "out": args.out}))


def _positive(text: str) -> int:
  v = int(text)
  if v < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
  return v


if __name__ == "__main__":
  main()
