"""UR²'s difficulty-aware curriculum and task mixing (seeds_ur2_rezero.md §A4.4), as a data stage.

    train = mix(records, seed=0, counts={"qa": 3000, "math": 3000},
                ratios={"qa": {"hard": 7, "medium": 2, "easy": 1},
                        "math": {"hard": 1, "medium": 1, "easy": 1}})

Each record carries its `task` (qa / math / mcq) and its difficulty: `difficulty_score` s, the
mean score of N rollouts of a fixed model (`ragjax.eval.difficulty`), or a `difficulty` label.
Labels: easy s >= 0.8, medium s >= 0.5, hard s >= 0.2, very_hard below (the thresholds are
`levels`); very_hard questions are dropped (`keep`), except where a stage asks for them
(Stage 1 trains on very_hard math).

Sampling (`mode="curriculum"`): per task, `counts[task]` questions split over the levels by
`ratios[task]` (largest remainder), drawn without replacement; QA 7:2:1 hard:medium:easy, math
1:1:1 (the simple math pool cannot follow 7:2:1), and `substitute` fills one level's quota from
another (LLaMA-3.1-8B: {"math": {"hard": "easy"}}).  A count of 0 takes the most questions the
pools allow at those ratios (with `shortage="take_all"`: every kept question, e.g. a small
world whose levels are uneven).  `mode="uniform"` draws the same number of questions per task
uniformly from the kept ones, whatever their level (the ablation).  A level too small for its
quota is an error naming the task, the level and both sizes, unless `shortage="take_all"`.

Sources: a `counts` key "task:source" (e.g. "mcq:medicine") draws that many questions of the
task from the records whose `source` is that source, each source its own pool under the task's
ratios (UR²'s multiple choice: 3,000 MedQA + 2,000 of each synthetic MMLU-Pro domain, not one
9,000 pool whose mix follows the pools' sizes).  A task counted by source takes no record of
another source (an error naming it).

Which samples get the retrieval prompt (`retrieval[task][level]`, a probability): all QA,
hard math only (easy and medium math get the CoT prompt), 5/7 of hard multiple choice and all
very_hard multiple choice (the code's `random() > 2/7`).  Each record's draw is seeded by
(seed, its id), once, so it never depends on the order or on the other records (the code draws
once at preprocessing, [D]: not per epoch).

The output records are copies with `task`, `difficulty`, `difficulty_score` and `retrieval`
set at the top level (the protocol reads `retrieval` and `task` from there: the prompt kind is
recorded per example), in a seeded order.  Registered as the data stage "ur2_curriculum".
"""

from __future__ import annotations

import random
from typing import Mapping, Optional, Sequence

from ragjax import registry
from ragjax.example_fields import record_field

LEVELS = (("easy", 0.8), ("medium", 0.5), ("hard", 0.2))
VERY_HARD = "very_hard"
LABELS = ("easy", "medium", "hard", VERY_HARD)
TASKS = ("qa", "math", "mcq")
DEFAULT_RATIOS = {"qa": {"hard": 7, "medium": 2, "easy": 1},
                  "math": {"hard": 1, "medium": 1, "easy": 1},
                  "mcq": {"hard": 7, "medium": 2, "easy": 1}}
DEFAULT_RETRIEVAL = {"qa": {"easy": 1.0, "medium": 1.0, "hard": 1.0, VERY_HARD: 1.0},
                     "math": {"hard": 1.0, VERY_HARD: 1.0},
                     "mcq": {"hard": 5 / 7, VERY_HARD: 1.0}}
MODES = ("curriculum", "uniform")
SHORTAGE = ("error", "take_all")


def label_of(score: float, levels: Sequence = LEVELS) -> str:
  """The difficulty label of a mean rollout score s in [0, 1]."""
  for name, low in levels:
    if score >= low:
      return name
  return VERY_HARD


def _where(rec: Mapping) -> str:
  return f"record {rec.get('id', '?')}"


def difficulty(rec: Mapping, levels: Sequence = LEVELS) -> tuple[str, Optional[float]]:
  """(label, score) of a record: its `difficulty_score` (labelled by `levels`), else its
  `difficulty` label; neither is an error naming the record."""
  score = record_field(rec, "difficulty_score")
  if score is not None:
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
      raise ValueError(f"{_where(rec)}: difficulty_score must be a number in [0, 1], got {score!r}")
    return label_of(float(score), levels), float(score)
  label = record_field(rec, "difficulty")
  if label is None:
    raise ValueError(f"{_where(rec)} has no difficulty_score or difficulty label (score the "
                     f"questions with `python -m ragjax.eval.difficulty` first)")
  if label not in LABELS:
    raise ValueError(f"{_where(rec)}: difficulty must be one of {LABELS}, got {label!r}")
  return label, None


def task_of(rec: Mapping) -> str:
  task = record_field(rec, "task")
  if task not in TASKS:
    raise ValueError(f"{_where(rec)}: task must be one of {TASKS}, got {task!r}")
  return task


def quotas(n: int, weights: Mapping[str, float]) -> dict[str, int]:
  """n split by `weights` with largest remainders (ties: the order of `weights`)."""
  total = float(sum(weights.values()))
  if total <= 0 or any(w < 0 for w in weights.values()):
    raise ValueError(f"ratios must be non-negative with a positive sum, got {dict(weights)}")
  exact = {k: n * w / total for k, w in weights.items()}
  out = {k: int(v) for k, v in exact.items()}
  order = sorted(weights, key=lambda k: -(exact[k] - out[k]))
  for k in order[:n - sum(out.values())]:
    out[k] += 1
  return out


def retrieval_draw(seed: int, rec_id: str) -> float:
  return random.Random(f"ur2-retrieval:{seed}:{rec_id}").random()


def _pools(records, keep, tasks, levels, by_source=()) -> dict[str, dict[str, list]]:
  """{pool: {level: records}}; a pool is a task, or "task:source" for tasks in `by_source`."""
  pools: dict[str, dict[str, list]] = {}
  for rec in records:
    task = task_of(rec)
    if tasks and task not in tasks:
      continue
    label, score = difficulty(rec, levels)
    if label not in keep:
      continue
    key = task
    if task in by_source:
      key = f"{task}:{record_field(rec, 'source', '')}"
      if key not in by_source[task]:
        raise ValueError(f"{_where(rec)}: {task} questions are counted by source "
                         f"({sorted(by_source[task])}), and its source is "
                         f"{record_field(rec, 'source', '')!r}")
    out = dict(rec, task=task, difficulty=label, difficulty_score=score)
    pools.setdefault(key, {}).setdefault(label, []).append(out)
  return pools


def _by_source(counts: Mapping[str, int]) -> dict[str, set]:
  """{task: its "task:source" count keys} of the tasks counted by source."""
  out: dict[str, set] = {}
  for key in counts:
    task, sep, source = str(key).partition(":")
    if task not in TASKS or (sep and not source):
      raise ValueError(f"counts key {key!r}: write TASK or TASK:SOURCE with TASK one of {TASKS}")
    if sep:
      out.setdefault(task, set()).add(key)
  clash = sorted(t for t in out if t in counts)
  if clash:
    raise ValueError(f"counts: {clash} counted both as a whole and by source")
  return out


def mix(records: Sequence[Mapping], *, seed: int, mode: str = "curriculum",
        counts: Optional[Mapping[str, int]] = None,
        ratios: Optional[Mapping[str, Mapping[str, float]]] = None,
        substitute: Optional[Mapping[str, Mapping[str, str]]] = None,
        retrieval: Optional[Mapping[str, Mapping[str, float]]] = None,
        keep: Sequence[str] = ("easy", "medium", "hard"), tasks: Sequence[str] = (),
        levels: Sequence = LEVELS, shortage: str = "error") -> list[dict]:
  """The training list (see the module docstring)."""
  if mode not in MODES:
    raise ValueError(f"curriculum mode must be one of {MODES}, got {mode!r}")
  if shortage not in SHORTAGE:
    raise ValueError(f"shortage must be one of {SHORTAGE}, got {shortage!r}")
  bad = sorted(set(keep) - set(LABELS))
  if bad:
    raise ValueError(f"keep: unknown difficulty labels {bad}; known: {LABELS}")
  levels = tuple((str(n), float(t)) for n, t in levels)
  counts, substitute = dict(counts or {}), dict(substitute or {})
  ratios = DEFAULT_RATIOS if ratios is None else dict(ratios)
  retrieval = DEFAULT_RETRIEVAL if retrieval is None else dict(retrieval)
  pools = _pools(records, set(keep), tuple(tasks), levels, _by_source(counts))
  if not pools:
    raise ValueError(f"no training question is left after keeping levels {list(keep)} of tasks "
                     f"{list(tasks) or list(TASKS)}")
  rng = random.Random(f"ur2-curriculum:{seed}")
  out = []
  for task in sorted(pools):          # a task, or "task:source"
    kind = task.partition(":")[0]
    by_level = {k: sorted(v, key=lambda r: str(r.get("id"))) for k, v in pools[task].items()}
    pool = [r for k in sorted(by_level) for r in by_level[k]]
    weights = {k: w for k, w in (ratios.get(task) or ratios.get(kind) or {}).items() if w > 0}
    sub = dict(substitute.get(task, substitute.get(kind, {})))
    source = {k: sub.get(k, k) for k in weights}
    n = counts.get(task, 0)
    if not n and (not weights or shortage == "take_all"):
      n = len(pool)
    elif not n:   # the most the pools allow at these ratios (uniform draws as many)
      need: dict[str, float] = {}
      for k, w in weights.items():
        need[source[k]] = need.get(source[k], 0.0) + w
      total = sum(weights.values())
      n = min(int(len(by_level.get(s, ())) * total / w) for s, w in need.items())
    if mode == "uniform" or not weights:
      if n > len(pool) and shortage == "error":
        raise ValueError(f"{task}: {n} questions asked (counts), {len(pool)} kept")
      out += rng.sample(pool, min(n, len(pool)))
      continue
    want = quotas(n, weights)
    taken: dict[str, int] = {}
    for k in weights:
      src = source[k]
      avail = [r for r in by_level.get(src, []) if id(r) not in taken]
      if want[k] > len(avail) and shortage == "error":
        via = f" (filled from {src})" if src != k else ""
        raise ValueError(f"{task}: the {k} quota{via} needs {want[k]} questions, the {src} "
                         f"pool has {len(avail)} left; lower counts.{task}, change the ratios "
                         f"or set shortage='take_all'")
      chosen = rng.sample(avail, min(want[k], len(avail)))
      for r in chosen:
        taken[id(r)] = 1
      out += chosen
  for rec in out:
    p = float(retrieval.get(rec["task"], {}).get(rec["difficulty"], 0.0))
    rec["retrieval"] = retrieval_draw(seed, str(rec.get("id"))) < p
  rng.shuffle(out)
  return out


@registry.register("data_stage", "ur2_curriculum")
def ur2_curriculum(records, *, seed: int, **kwargs) -> list[dict]:
  """UR²'s difficulty curriculum and task mix over the training records (seeded, resumable)."""
  return mix(records, seed=seed, **kwargs)
