"""R3-RAG's step rewards (seeds_rex_autorefine_r3.md §3.3, the code's semantics).

One value per step (turn) of a trajectory; with `rl.step_samples` each lands on its own step
sample.  For a trajectory T with search steps j and outcome o:

| outcome | search step j | last step |
|---|---|---|
| answered, correct | Rel_j x (1 + gamma_correct) = 1.6 Rel_j | `answer_reward` = 2.0 |
| answered, incorrect | Rel_j x (1 + gamma_incorrect) = 0.8 Rel_j | 0.0 |
| no answer ("fail": the last step is a search) | Rel_j x (1 + gamma_fail) = 0.9 Rel_j | (a search step) |
| format failure at step k | Rel_j x 1 for j < k | `format_penalty` = -0.9 |

lambda_T = 1 + gamma is the code's multiplier (the paper calls gamma the sign).  Correctness is
Acc = Acc_match OR Acc_model and Rel the relevance judge's score, with the heuristic when the
judge fails and 0 for a reply without a score (`ragjax.services.r3_judges`); both judges are the
run's `judge` service (`ctx.services`), asked once per training step for all rows.  A format
failure is a last step whose parse gave neither a search nor an answer (malformed text, a step
header missing, a step cut by the token budget); the protocol has already stopped the
trajectory there.

Ablations: `process=False` drops the relevance terms (the paper's "without process reward",
outcome-only PPO); `answer_judge=False` is Acc_match only.  Each row's record gets
`extra["r3"]` (outcome, Rel per step, judge counts) for the `r3_rag` metric.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ragjax import registry
from ragjax.rl.rewards.registry import RewardContext, batched_reward, register_reward
from ragjax.rollout.protocols.r3_rag import r3_step_fields
from ragjax.services.r3_judges import answer_correct, step_relevance

CORRECT, INCORRECT, FAIL, FORMAT = "correct", "incorrect", "fail", "format"


def rl_prompt(question: str) -> str:
  """The RL prompt text the judges read as the problem / question (§3.3)."""
  return f"The question: {question}"


def outcome_of(row, correct: bool) -> str:
  """correct | incorrect (answered), fail (the last step searched), format (anything else)."""
  if row.answer is not None:
    return CORRECT if correct else INCORRECT
  if row.turns and row.turns[-1].action == "search":
    return FAIL
  return FORMAT


def step_rewards(actions: Sequence[str], relevance: Sequence[float], outcome: str, *,
                 gamma_correct: float = 0.6, gamma_incorrect: float = -0.2,
                 gamma_fail: float = -0.1, answer_reward: float = 2.0,
                 format_penalty: float = -0.9) -> list[float]:
  """The per-step rewards of one trajectory from its steps' actions, the relevance of each
  step (used on search steps) and its outcome (see the module docstring)."""
  lam = {CORRECT: 1.0 + gamma_correct, INCORRECT: 1.0 + gamma_incorrect,
         FAIL: 1.0 + gamma_fail, FORMAT: 1.0}[outcome]
  out = [lam * float(rel) if action == "search" else 0.0
         for action, rel in zip(actions, relevance)]
  if outcome == CORRECT:
    out[-1] = answer_reward
  elif outcome == INCORRECT:
    out[-1] = 0.0
  elif outcome == FORMAT:
    out[-1] = format_penalty
  return out


@register_reward("r3_rag")
@batched_reward
def r3_rag_reward(ctxs: Sequence[RewardContext], judge: str = "judge", process: bool = True,
                  answer_judge: bool = True, gamma_correct: float = 0.6,
                  gamma_incorrect: float = -0.2, gamma_fail: float = -0.1,
                  answer_reward: float = 2.0, format_penalty: float = -0.9) -> list[list[float]]:
  """Per-step R3-RAG rewards of every row (one relevance and one correctness request batch)."""
  need = answer_judge or process
  chat = ctxs[0].service(judge) if need and ctxs else None
  acc, acc_stats = answer_correct(
      chat, [(rl_prompt(c.example["question"]), c.row.answer, list(c.golden_answers))
             for c in ctxs], use_model=answer_judge)
  where, items = [], []
  if process:
    for i, c in enumerate(ctxs):
      for j, turn in enumerate(c.row.turns):
        if turn.action == "search":
          fields = r3_step_fields(turn.text)
          where.append((i, j))
          items.append((rl_prompt(c.example["question"]), fields["analysis"],
                        turn.query or fields["query"], list(turn.doc_texts)))
  rels, rel_stats = step_relevance(chat, items)
  relevance = [[0.0] * len(c.row.turns) for c in ctxs]
  for (i, j), r in zip(where, rels):
    relevance[i][j] = r
  out = []
  for i, c in enumerate(ctxs):
    outcome = outcome_of(c.row, acc[i])
    actions = [t.action for t in c.row.turns] or ["end"]
    rel = relevance[i] or [0.0]
    out.append(step_rewards(actions, rel, outcome, gamma_correct=gamma_correct,
                            gamma_incorrect=gamma_incorrect, gamma_fail=gamma_fail,
                            answer_reward=answer_reward, format_penalty=format_penalty))
    c.row.extra["r3"] = {"outcome": outcome, "relevance": [relevance[i][j] for j, a in
                                                             enumerate(actions) if a == "search"]}
  if ctxs:
    ctxs[0].row.extra["r3"]["judge"] = {
        "answer_requests": acc_stats["requests"], "answer_unparsed": acc_stats["unparsed"],
        "answer_failed": acc_stats["failed"], "relevance_requests": rel_stats["requests"],
        "relevance_unparsed": rel_stats["unparsed"], "relevance_failed": rel_stats["failed"]}
  return out


@registry.register("metric", "r3_rag")
def r3_rag_metrics(rows, examples) -> dict:
  """Outcome shares, mean relevance of the search steps, judge counts of the step (from the
  records the `r3_rag` reward annotated)."""
  recs = [r.extra["r3"] for r in rows if "r3" in r.extra]
  if not recs:
    return {}
  rels = [x for rec in recs for x in rec["relevance"]]
  out = {f"outcome_{o}": float(np.mean([rec["outcome"] == o for rec in recs]))
         for o in (CORRECT, INCORRECT, FAIL, FORMAT)}
  out["relevance"] = float(np.mean(rels)) if rels else 0.0
  for rec in recs:
    for k, v in rec.get("judge", {}).items():
      out[f"judge_{k}"] = out.get(f"judge_{k}", 0.0) + float(v)
  return out
