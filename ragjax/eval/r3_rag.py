"""R3-RAG's evaluation: ACC by the judge plus EM / F1 of the short answer (seeds §3.7).

    r = evaluate_r3("R3-RAG", engine, records, "dev", judge=chat, batch_size=64)
    r.acc, r.system.em, r.f1                      # per question
    table = r3_table([r, ...])                    # ACC / F1 / EM with bootstrap intervals

The engine decides the protocol: R3-RAG evaluates greedily (temperature 0) with the top-5
complete documents per step and at most 5 steps (`R3Rag(top_k=5, obs_max_chars=None)`).
ACC is `ragjax.services.r3_judges.answer_correct` (Acc_match OR the `r3_answer` judge, the same
check the training reward uses; the paper's evaluation judge is Qwen2.5-72B-Instruct).  EM / F1
are SQuAD-normalised on the protocol's parse of the final answer (the paper scores an
LLM-extracted short answer; its extraction prompt is not given, so the text after
"The final answer:" is the short answer here).  A trajectory without an answer scores 0.

`judge_accuracy` is the reusable part for other harnesses: ACC of given answers.  Without a
judge (`judge=None`) ACC is not computed (`R3Result.acc` is None, the table says so): the
string match alone is not the paper's ACC.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ragjax.eval.systems import SystemResult, evaluate_system
from ragjax.metrics import answer_metrics
from ragjax.services.r3_judges import answer_correct


@dataclasses.dataclass
class R3Result:
  system: SystemResult        # EM per question, question types, rollouts
  acc: Optional[list[float]]  # None: not computed (no evaluation judge)
  f1: list[float]
  judge: dict                 # request / unparsed / failed counts


def judge_accuracy(judge, records: Sequence[dict], answers: Sequence[Optional[str]], *,
                   use_model: bool = True) -> tuple[list[float], dict]:
  """R3-RAG's ACC of each answer (1.0 / 0.0) and the judge's counts; `judge=None` or
  `use_model=False` is the string match alone."""
  ok, stats = answer_correct(judge, [(f"The question: {r['question']}", a,
                                      list(r["golden_answers"])) for r, a in zip(records, answers)],
                             use_model=use_model and judge is not None)
  return [float(x) for x in ok], stats


def evaluate_r3(name: str, engine, records: Sequence[dict], split: str, *, judge,
                batch_size: int, seed: int = 0, signatures: Sequence[str] = ()) -> R3Result:
  """Rollouts of every record with `engine`, scored with ACC, EM and F1 (and the named
  signature metrics, `ragjax.rl.signatures`)."""
  system = evaluate_system(name, engine, records, split, batch_size=batch_size, seed=seed,
                           signatures=signatures)
  answers = [row.answer for b in system.batch for row in b.rows][:len(records)]
  acc, stats = judge_accuracy(judge, records, answers) if judge is not None else (None, {})
  f1 = [answer_metrics(a, r["golden_answers"])["f1"] for a, r in zip(answers, records)]
  return R3Result(system, acc, f1, stats)


def r3_table(results: Sequence[R3Result]) -> str:
  """Markdown: ACC / F1 / EM (95% bootstrap intervals) per system and split."""
  from ragjax.report.bootstrap import bootstrap_mean
  lines = ["| split | system | n | ACC | F1 | EM |", "|---|---|---|---|---|---|"]
  for r in results:
    s = r.system
    acc = "not computed" if r.acc is None else bootstrap_mean(r.acc)
    lines.append(f"| {s.split} | {s.name} | {len(s.em)} | {acc} | "
                 f"{bootstrap_mean(r.f1)} | {bootstrap_mean(s.em)} |")
  if any(r.acc is None for r in results):
    lines += ["", "ACC: not computed (no evaluation judge: set eval.judge.url or "
                  "eval.judge.checkpoint; the paper's is Qwen2.5-72B-Instruct)."]
  return "\n".join(lines)
