"""Reward designs compared on the same rollouts: how much GRPO signal each would give.

    python -m ragjax.rl.reward_designs runs/smollm2_default/rl/rollouts \\
        --design 'em={"search_r1_em": [1.0, {}]}' \\
        --design 'em+f1={"search_r1_format": [1.0, {"retrieval_score": 0.2}], "f1": [0.5, {}]}'

Reads the trainer's rollout dumps (`trainer.dump_every`; `rollouts/step_*.jsonl`: each row's
text, answer, searches, group and its question's gold answers), scores every row again under
each design (a design is `rl.rewards` with its `rl.reward_kwargs`: `{reward: [weight,
{kwargs}]}`, the registered rewards themselves), and reports per design what GRPO would train
on: the groups whose rewards vary (those `filter_groups` keeps), among them the groups where
exact match varies (the signal that is about the answer) and those that vary for another term
only, and the share of the GRPO advantage mass that points at right answers.  The run's own
design is checked first: rescoring its rows must give the rewards it logged.

Rewards that read what a dump does not keep (the retrieved passages one by one, a judge
service) cannot be rescored here; they stop with one `error:` line naming the reward.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
from typing import Mapping, Optional, Sequence

import numpy as np

from ragjax.metrics.answer import exact_match
from ragjax.rl.advantages import grpo_advantages
from ragjax.rl.rewards import RewardContext, get_reward, score_rows
from ragjax.rollout.dump import DumpError, read_jsonl


@dataclasses.dataclass
class DumpedTurn:
  """A turn as a dump keeps it (no passage texts)."""
  action: str
  query: Optional[str]


@dataclasses.dataclass
class DumpedRow:
  """The part of `ragjax.rollout.trajectory.RowMeta` a dump keeps: what text-level rewards
  read (the response text, the parsed answer, the turns and their searches)."""
  response_text: str
  answer: Optional[str]
  turns: list
  group_id: int
  stop_reason: str = ""

  @property
  def queries(self) -> list:
    return [t.query for t in self.turns if t.action == "search"]

  @property
  def num_searches(self) -> int:
    return len(self.queries)

  @property
  def num_turns(self) -> int:
    return len(self.turns)


def dumped_row(rec: Mapping) -> DumpedRow:
  """A dump record as a row: the response text is every span after the prompt, in order."""
  text = "".join(s["text"] for s in rec["spans"] if s["label"] != "PROMPT")
  turns = [DumpedTurn(t.get("action", ""), t.get("query")) for t in rec["turns"]]
  return DumpedRow(text, rec.get("answer"), turns, int(rec["group_id"]), rec.get("stop_reason", ""))


def read_rollouts(paths: Sequence[str]) -> list[dict]:
  """The records of dump files, or of every `step_*.jsonl` in a directory, in step order; each
  record keeps its step so groups of different steps stay apart."""
  files = []
  for p in paths:
    files += sorted(glob.glob(os.path.join(p, "step_*.jsonl"))) if os.path.isdir(p) else [p]
  if not files:
    raise DumpError(f"no rollout dumps in {list(paths)} (the trainer writes them with "
                    "trainer.dump_every > 0)")
  recs = []
  for f in files:
    for rec in read_jsonl(f):
      if "golden_answers" not in rec:
        raise DumpError(f"{f}: row {rec.get('row')} has no golden_answers (not a trainer's "
                        "rollout dump)")
      rec.setdefault("step", 0)
      recs.append(rec)
  return recs


def parse_design(text: str) -> tuple[str, dict, dict]:
  """`name={reward: [weight, {kwargs}], ...}` -> (name, rl.rewards, rl.reward_kwargs)."""
  name, sep, spec = text.partition("=")
  if not sep or not name:
    raise ValueError(f"--design {text!r}: expected name={{reward: [weight, {{kwargs}}]}}")
  try:
    parsed = json.loads(spec)
  except json.JSONDecodeError as e:
    raise ValueError(f"--design {name}: not JSON ({e.msg} at character {e.pos})") from None
  if not isinstance(parsed, dict) or not parsed:
    raise ValueError(f"--design {name}: expected a non-empty object of rewards")
  weights, kwargs = {}, {}
  for reward, value in parsed.items():
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict)
            and isinstance(value[0], (int, float))):
      raise ValueError(f"--design {name}: reward {reward!r} must be [weight, {{kwargs}}]")
    try:
      get_reward(reward)
    except KeyError as e:
      raise ValueError(f"--design {name}: {e.args[0]}") from None
    weights[reward], kwargs[reward] = float(value[0]), value[1]
  return name, weights, kwargs


def rescore(recs: Sequence[Mapping], weights: Mapping[str, float],
            kwargs: Mapping[str, Mapping]) -> np.ndarray:
  """Every record's reward under one design (the registered rewards, `score_rows`)."""
  ctxs = [RewardContext(dumped_row(r), {"golden_answers": r["golden_answers"],
                                        "question": r.get("question", "")}, int(r["step"]))
          for r in recs]
  records = [f"step {r['step']} row {r['row']}" for r in recs]
  try:
    return np.asarray([x.total for x in score_rows(weights, ctxs, kwargs, records)], np.float64)
  except ValueError as e:
    if isinstance(e.__cause__, (AttributeError, KeyError)):
      raise ValueError(f"{e}: it reads something a rollout dump does not keep") from None
    raise


def group_keys(recs: Sequence[Mapping]) -> np.ndarray:
  """One id per (step, group): GRPO's groups, never mixing steps."""
  keys = {}
  return np.asarray([keys.setdefault((int(r["step"]), int(r["group_id"])), len(keys))
                     for r in recs])


def signal(rewards: np.ndarray, groups: np.ndarray, em: np.ndarray) -> dict:
  """What GRPO trains on under `rewards`: varied groups (kept by `filter_groups`), of those
  the ones whose EM varies and the ones that vary for another term only, rows kept, and the
  share of |advantage| carried by rows that answered right with a positive advantage or wrong
  with a negative one (`aligned`: 1 when every advantage points the way EM does)."""
  adv = grpo_advantages(rewards, groups)
  varied = em_varied = 0
  kept = np.zeros(len(rewards), bool)
  for g in np.unique(groups):
    idx = groups == g
    if np.ptp(rewards[idx]) > 0:
      varied += 1
      kept |= idx
      em_varied += int(np.ptp(em[idx]) > 0)
  mass = np.abs(adv[kept]).sum()
  right_way = np.abs(adv[kept & (((em > 0) & (adv > 0)) | ((em == 0) & (adv < 0)))]).sum()
  return {"mean_reward": float(rewards.mean()), "groups": int(len(np.unique(groups))),
          "varied_groups": varied, "em_varied_groups": em_varied,
          "other_term_only_groups": varied - em_varied, "kept_rows": int(kept.sum()),
          "aligned": float(right_way / mass) if mass > 0 else float("nan")}


def compare(recs: Sequence[Mapping], designs: Sequence[tuple[str, dict, dict]]) -> dict:
  """Each design's `signal` on the same rows; also the EM groups a perfect filter would keep."""
  groups = group_keys(recs)
  em = np.asarray([exact_match(r["answer"], r["golden_answers"]) if r.get("answer") is not None
                   else 0.0 for r in recs])
  out = {"rows": len(recs), "steps": len({int(r["step"]) for r in recs}),
         "em": float(em.mean()), "designs": {}}
  for name, weights, kwargs in designs:
    out["designs"][name] = dict(signal(rescore(recs, weights, kwargs), groups, em),
                                rewards=dict(weights), reward_kwargs=dict(kwargs))
  return out


def logged_matches(recs: Sequence[Mapping], weights, kwargs, tol: float = 1e-6) -> int:
  """How many rows the design gives the reward the run logged (the rescoring's check)."""
  got = rescore(recs, weights, kwargs)
  logged = np.asarray([r.get("reward", np.nan) for r in recs], np.float64)
  return int(np.sum(np.abs(got - logged) <= tol))


def table(result: Mapping) -> str:
  lines = [f"{result['rows']} rollouts of {result['steps']} steps, EM {result['em']:.3f}", "",
           "| design | mean reward | varied groups | EM varies | other term only | rows kept | "
           "advantage aligned with EM |", "|---|---|---|---|---|---|---|"]
  for name, s in result["designs"].items():
    lines.append(f"| {name} | {s['mean_reward']:.3f} | {s['varied_groups']} of {s['groups']} | "
                 f"{s['em_varied_groups']} | {s['other_term_only_groups']} | {s['kept_rows']} | "
                 f"{s['aligned']:.2f} |")
  return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  import argparse
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("rollouts", nargs="+", help="rollout dump files or directories")
  ap.add_argument("--design", action="append", default=[], required=True,
                  help='name={"reward": [weight, {kwargs}], ...}; repeat for each design')
  ap.add_argument("--check", default=None,
                  help="the name of the design the run itself used: its rows must rescore "
                       "to the rewards the run logged")
  ap.add_argument("--out", default=None, help="also write the comparison as JSON here")
  args = ap.parse_args(argv)
  try:
    designs = [parse_design(d) for d in args.design]
    recs = read_rollouts(args.rollouts)
    if args.check is not None:
      found = [d for d in designs if d[0] == args.check]
      if not found:
        raise ValueError(f"--check {args.check!r}: no --design of that name")
      n = logged_matches(recs, found[0][1], found[0][2])
      print(f"design {args.check!r} reproduces the logged reward on {n} of {len(recs)} rows")
      if n != len(recs):
        raise ValueError(f"design {args.check!r} is not the run's reward ({len(recs) - n} rows "
                         "differ)")
    result = compare(recs, designs)
  except (ValueError, DumpError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(table(result))
  if args.out:
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
      json.dump(result, f, indent=1)
    os.replace(tmp, args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
