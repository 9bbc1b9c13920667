"""R3-RAG's step rewards (seeds_rex_autorefine_r3.md §3.3, the code's semantics).

One value per step (turn) of a trajectory; with `rl.step_samples` each lands on its own step
sample.  For a trajectory T with search steps j and outcome o, Eq. 4 scales the relevance
(process) reward by lambda_T(T):

| outcome | lambda_T: the paper ("gamma") | the code ("one_plus_gamma") | last step |
|---|---|---|---|
| answered, correct | gamma_correct = 0.6 | 1 + 0.6 = 1.6 | `answer_reward` = 2.0 |
| answered, incorrect | gamma_incorrect = -0.2 | 1 - 0.2 = 0.8 | 0.0 |
| no answer ("fail": the last step is a search) | gamma_fail = -0.1 | 1 - 0.1 = 0.9 | (a search step) |
| format failure at step k (Rel_j for j < k) | 1 | 1 | `format_penalty` = -0.9 |

`lambda_form="gamma"` (the default) is §3.3 as written: "For trajectories with correct answers,
lambda_T is positive ...; for incorrect answers or failures to produce answers due to
overthinking, it is negative ...  For trajectories with format errors, lambda_T equals 1",
with App. E's gamma_fail = -0.1, gamma_incorrect = -0.2, gamma_correct = 0.6: relevance is
penalised on wrong and failed trajectories.  E.g. Rel = (0.8, 0.5) then an answer: correct
-> (0.48, 0.30, 2.0), incorrect -> (-0.16, -0.10, 0.0).  `"one_plus_gamma"` is the released
code's `reward * (1 + correct_bonus_factor)` / `(1 - uncorrect_penalty_factor)` /
`(1 - fail_penalty_factor)` (train/R3RAG_OpenRLHF/openrlhf/trainer/ppo_utils/
experience_maker.py), always positive: (1.28, 0.80, 2.0) and (0.64, 0.40, 0.0).

The relevance judge reads the step's documents as the policy saw them: each cut to
`doc_chars` (`doc_cut="each"`, the paper's App. E) or the joined string cut
(`"joined"`, the code); the config links both to `protocol.doc_cut` / `obs_max_chars`.
Correctness is
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

from typing import Optional, Sequence

import numpy as np

from ragjax import registry
from ragjax.rl.rewards.context import RewardContext, batched_reward
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


LAMBDA_FORMS = ("gamma", "one_plus_gamma")


def outcome_lambda(outcome: str, *, gamma_correct: float = 0.6, gamma_incorrect: float = -0.2,
                   gamma_fail: float = -0.1, lambda_form: str = "gamma") -> float:
  """lambda_T of Eq. 4 for a trajectory outcome (see the module docstring)."""
  if lambda_form not in LAMBDA_FORMS:
    raise ValueError(f"r3_rag lambda_form must be one of {LAMBDA_FORMS}, got {lambda_form!r}")
  if outcome == FORMAT:
    return 1.0
  gamma = {CORRECT: gamma_correct, INCORRECT: gamma_incorrect, FAIL: gamma_fail}[outcome]
  return gamma if lambda_form == "gamma" else 1.0 + gamma


def step_rewards(actions: Sequence[str], relevance: Sequence[float], outcome: str, *,
                 gamma_correct: float = 0.6, gamma_incorrect: float = -0.2,
                 gamma_fail: float = -0.1, answer_reward: float = 2.0,
                 format_penalty: float = -0.9, lambda_form: str = "gamma") -> list[float]:
  """The per-step rewards of one trajectory from its steps' actions, the relevance of each
  step (used on search steps) and its outcome (see the module docstring)."""
  lam = outcome_lambda(outcome, gamma_correct=gamma_correct, gamma_incorrect=gamma_incorrect,
                       gamma_fail=gamma_fail, lambda_form=lambda_form)
  out = [lam * float(rel) if action == "search" else 0.0
         for action, rel in zip(actions, relevance)]
  if outcome == CORRECT:
    out[-1] = answer_reward
  elif outcome == INCORRECT:
    out[-1] = 0.0
  elif outcome == FORMAT:
    out[-1] = format_penalty
  return out


@registry.register("reward", "r3_rag")
@batched_reward
def r3_rag_reward(ctxs: Sequence[RewardContext], judge: str = "judge", process: bool = True,
                  answer_judge: bool = True, gamma_correct: float = 0.6,
                  gamma_incorrect: float = -0.2, gamma_fail: float = -0.1,
                  answer_reward: float = 2.0, format_penalty: float = -0.9,
                  lambda_form: str = "gamma", doc_cut: str = "joined",
                  doc_chars: Optional[int] = 512) -> list[list[float]]:
  """Per-step R3-RAG rewards of every row (one relevance and one correctness request batch)."""
  outcome_lambda(CORRECT, lambda_form=lambda_form)       # a bad form fails before any request
  if doc_cut not in ("each", "joined"):
    raise ValueError(f"r3_rag doc_cut must be 'each' or 'joined', got {doc_cut!r}")
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
          docs = [d[:doc_chars] if doc_cut == "each" else d for d in turn.doc_texts]
          items.append((rl_prompt(c.example["question"]), fields["analysis"],
                        turn.query or fields["query"], docs))
  rels, rel_stats = step_relevance(chat, items,
                                   max_doc_chars=None if doc_cut == "each" else doc_chars)
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
                            answer_reward=answer_reward, format_penalty=format_penalty,
                            lambda_form=lambda_form))
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
