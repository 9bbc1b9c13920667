"""UR²'s rewards (seeds_ur2_rezero.md §A3), each a registered function of the row's record, the
example (its task and retrieval flag) and the training step.

    Stage 1 (§A3.3):  {"ur2_format": 1, "ur2_retrieval": 1, "ur2_fallback": 1}  (mode "stage1")
    Stage 2 (§A3.4):  {"ur2_answer": 1, "ur2_format": 1, "ur2_fallback": 1}

* `ur2_answer`: math 2 / 1 / 0 (a rule check with math-verify, then, when a judge is given,
  the paper's judge prompt: Correct 2, Partially correct 1, else 0), open-domain QA 2 x token
  F1 (the reward server's normalisation), multiple choice 2 x letter EM; an empty answer is 0.
  That is the authors' reward servers (`UR2_RL/train/reward_server_*_stage2.py`), which
  trained the paper's models; `binary=True` is the paper's text (Eq. 5: "+2 for correct
  answers, 0 for incorrect"): QA 2 x exact match under the same normalisation, math 2 only for
  a rule match or a judged "Correct" (partial credit 0).
* `ur2_format`: the nine checks of `ur2_checks`; Stage 1 (mode "stage1") +1 when clean, else
  minus the number of violations on retrieval samples (0 on the others, as the code); Stage 2
  +1 when clean, else 0.
* `ur2_retrieval`: `one` for one served search, `many` for two or more, on retrieval samples
  during the first `steps` training steps (0: every step).  7B: 3 / 4; 3B: 5 / 7; LLaMA: 3 / 3;
  the "weaker Stage 1": 0.5 / 1.0 for 10 steps inside Stage 2.
* `ur2_fallback`: -penalty (0.5) per search the summariser answered with its fallback sentence,
  on retrieval samples.

The task and the retrieval flag are the example's (`task`, `retrieval`, top level or in
metadata, as the protocol reads them); `task` kwargs give the default.  Steps are the trainer's
(1-based): "the first N steps" gates on step <= N.  A search counts as valid when it was served
(the code counts `<|begin_of_query|>` tags, so an empty or final-turn query still paid).
"""

from __future__ import annotations

import threading

from ragjax import registry
from ragjax.metrics import letter_match, math_equal
from ragjax.metrics.answer import normalize_answer_spaced, token_f1
from ragjax.rl.rewards.context import RewardContext
from ragjax.rl.rewards.ur2_checks import violations
from ragjax.example_fields import record_field
from ragjax.rollout.protocols.ur2 import check_task

STAGE_MODES = ("stage1", "stage2")


def example_task(ctx: RewardContext, default: str = "qa") -> str:
  return check_task(record_field(ctx.example, "task", "") or default,
                    f"record {ctx.example.get('id', '?')}: task")


def example_retrieval(ctx: RewardContext) -> bool:
  return bool(record_field(ctx.example, "retrieval", True))


def in_first_steps(step: int, steps: int) -> bool:
  """The first `steps` training steps (0 = always)."""
  return steps <= 0 or step <= steps


# --- the math judge ---------------------------------------------------------------------------
_JUDGES: dict = {}
_JUDGES_LOCK = threading.Lock()


def math_judge(ctx: RewardContext, judge_url: str = "", judge_model: str = "",
               judge_checkpoint: str = "", judge_api_key_env: str = "", judge_cache: str = "",
               judge_max_tokens: int = 512):
  """The run's math judge: the trainer's "judge" service when it has one, else a client built
  once from these kwargs (an OpenAI-compatible URL, or an HF checkpoint run in process), else
  None (rule check only: the documented local substitute, seeds §A9.4)."""
  services = getattr(ctx, "services", None) or {}
  if "judge" in services:
    from ragjax.services.judge import TemplateJudge
    return TemplateJudge(services["judge"], "ur2_math_judge", max_tokens=judge_max_tokens,
                         temperature=0.0)
  if not (judge_url or judge_checkpoint):
    return None
  key = (judge_url, judge_model, judge_checkpoint, judge_api_key_env, judge_cache,
         judge_max_tokens)
  with _JUDGES_LOCK:
    if key not in _JUDGES:
      from ragjax.services.judge import TemplateJudge
      if judge_url:
        from ragjax.services.http_client import OpenAIChatClient
        chat = OpenAIChatClient(judge_url, judge_model or "judge",
                                api_key_env=judge_api_key_env or None,
                                cache_path=judge_cache or None)
      else:
        from ragjax.services.local import LocalChatModel
        chat = LocalChatModel.from_checkpoint(judge_checkpoint, max_new_tokens=judge_max_tokens)
      # The code's settings: temperature 0.0, 512 tokens (seeds §A3.1).
      _JUDGES[key] = TemplateJudge(chat, "ur2_math_judge", max_tokens=judge_max_tokens,
                                   temperature=0.0)
    return _JUDGES[key]


def qa_exact(pred: str, golds) -> float:
  """1.0 iff the prediction equals a gold alias under the reward server's normalisation.  An
  answer or alias that normalises to the empty string never matches (articles are dropped, so
  "The" and the gold "A" would both be ""), as in `ragjax.metrics.answer.exact_match`."""
  norm = normalize_answer_spaced(pred)
  return float(bool(norm) and any(norm == normalize_answer_spaced(g)
                   for g in ([golds] if isinstance(golds, str) else golds)))


def answer_score(task: str, pred: str, golds, question: str = "", judge=None,
                 binary: bool = False) -> float:
  """UR²'s Stage-2 answer score in [0, 2] (seeds §A3.1); `binary`: 2 or 0 (see above)."""
  if not pred:
    return 0.0
  if task == "mcq":
    return 2.0 * letter_match(pred, golds)
  if task == "qa":
    if binary:
      return 2.0 * qa_exact(pred, golds)
    return 2.0 * token_f1(pred, golds, normalize=normalize_answer_spaced)
  if math_equal(pred, golds):
    return 2.0
  if judge is None:
    return 0.0
  gold = golds if isinstance(golds, str) else golds[0]
  score = float(judge([dict(question=question, gold=gold, pred=pred)])[0])
  return (2.0 if score == 2.0 else 0.0) if binary else score


@registry.register("reward", "ur2_answer")
def ur2_answer_reward(ctx: RewardContext, task: str = "qa", binary: bool = False,
                      **judge_kwargs) -> float:
  """UR² answer score: QA 2 x F1, choice 2 / 0, math by rule and judge (binary=True: +2 / 0)."""
  return answer_score(example_task(ctx, task), ctx.answer or "", ctx.golden_answers,
                      str(ctx.example.get("question", "")), math_judge(ctx, **judge_kwargs),
                      binary=binary)


def row_violations(ctx: RewardContext, task: str = "qa", family="qwen",
                   missing_retrieval_steps: int = -1) -> list[str]:
  """The row's violated checks; check 9 is on during the first `missing_retrieval_steps`
  steps (0: always, < 0: never)."""
  golds = ctx.golden_answers
  gold = golds if isinstance(golds, str) else golds[0]
  missing = missing_retrieval_steps >= 0 and in_first_steps(ctx.step, missing_retrieval_steps)
  return violations(ctx.row.policy_text, ctx.answer or "", gold, task=example_task(ctx, task),
                    retrieval=example_retrieval(ctx), searches=ctx.row.num_searches,
                    missing_retrieval=missing, family=family)


@registry.register("reward", "ur2_format")
def ur2_format_reward(ctx: RewardContext, mode: str = "stage2", task: str = "qa",
                      family="qwen", missing_retrieval_steps: int = -1) -> float:
  """UR² format checks: 1 when none is violated; Stage 1 retrieval rows lose 1 per violation."""
  if mode not in STAGE_MODES:
    raise ValueError(f"ur2_format mode must be one of {STAGE_MODES}, got {mode!r}")
  n = len(row_violations(ctx, task, family, missing_retrieval_steps))
  if n == 0:
    return 1.0
  return -float(n) if mode == "stage1" and example_retrieval(ctx) else 0.0


@registry.register("reward", "ur2_retrieval")
def ur2_retrieval_reward(ctx: RewardContext, one: float = 3.0, many: float = 4.0,
                         steps: int = 0) -> float:
  """UR² Stage 1 retrieval reward: `one` for one search, `many` for more, on retrieval rows."""
  if not example_retrieval(ctx) or not in_first_steps(ctx.step, steps):
    return 0.0
  n = ctx.row.num_searches
  return 0.0 if n == 0 else float(one) if n == 1 else float(many)


@registry.register("reward", "ur2_fallback")
def ur2_fallback_reward(ctx: RewardContext, penalty: float = 0.5) -> float:
  """UR² penalty per search answered with the summariser's fallback sentence."""
  if not example_retrieval(ctx):
    return 0.0
  fallbacks = ctx.row.extra.get("fallbacks")
  if fallbacks is None:
    raise KeyError("the row record has no 'fallbacks' (use the ur2 protocol, which counts the "
                   "searches answered with the summariser's fallback sentence)")
  return -float(penalty) * int(fallbacks)


@registry.register("metric", "ur2_tasks")
def task_metrics(rows, examples, task: str = "qa") -> dict[str, float]:
  """Per task: the answer score / 2 (no judge), the share of rows that searched and the share
  prompted with retrieval; and the curriculum's mix of the step: the share of rows per
  difficulty label (`level/hard`, ...: the curriculum stage the step's questions come from)
  where the records carry one (`rl.metrics = ("ur2_tasks",)`)."""
  by: dict[str, list] = {}
  levels: dict[str, int] = {}
  for row, ex in zip(rows, examples):
    ctx = RewardContext(row, ex)
    label = record_field(ex, "difficulty", "")
    if label:
      levels[str(label)] = levels.get(str(label), 0) + 1
    t = example_task(ctx, task)
    by.setdefault(t, []).append((answer_score(t, row.answer or "", ex["golden_answers"]) / 2,
                                 float(row.num_searches > 0), float(example_retrieval(ctx))))
  out = {}
  for t, vals in sorted(by.items()):
    n = len(vals)
    out[f"{t}/score"] = sum(v[0] for v in vals) / n
    out[f"{t}/searched"] = sum(v[1] for v in vals) / n
    out[f"{t}/retrieval_prompt"] = sum(v[2] for v in vals) / n
  for label, k in sorted(levels.items()):
    out[f"level/{label}"] = k / len(rows)
  return out
