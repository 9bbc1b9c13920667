"""Train / dev / test splits drawn from one pool of question files, by a fixed seed.

    splits = split_records(records, SplitConfig(files=(...), dev=100, test=400, seed=0))

For question sets that come without a training split (ragjax's real-data config splits the
1,668 HotpotQA dev questions whose supporting passages are all in the shared corpus): the
records are de-duplicated by question (case- and space-insensitive; the first occurrence is
kept), ordered by id, shuffled by `seed`, and cut into `test`, then `dev`, then the rest for
training.  No question is in two splits, and the same files and seed give the same splits on
any machine.  `check_splits` refuses splits that share a question or repeat one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SplitConfig:
  files: tuple = ()        # question files pooled, then split ("" / () = no split)
  dev: int = 0             # questions held out for keep-best and curves
  test: int = 0            # questions held out for the final table
  seed: int = 0

  def __post_init__(self):
    for name in ("dev", "test", "seed"):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"data.split.{name} must be a non-negative integer, got {v!r}")
    if self.seed >= 2 ** 32:                  # numpy's RandomState takes 32 bits
      raise ValueError(f"data.split.seed must be an integer in [0, 2**32), got {self.seed!r}")


def question_key(record: dict) -> str:
  return " ".join(str(record["question"]).lower().split())


def dedupe_questions(records: Sequence[dict]) -> list[dict]:
  """The records with each question once (first occurrence kept)."""
  seen, out = set(), []
  for r in records:
    k = question_key(r)
    if k not in seen:
      seen.add(k)
      out.append(r)
  return out


def split_records(records: Sequence[dict], cfg: SplitConfig) -> dict[str, list[dict]]:
  """{"train", "dev", "test"}: disjoint by question, deterministic in `cfg.seed`."""
  pool = sorted(dedupe_questions(records), key=lambda r: str(r.get("id", question_key(r))))
  if cfg.dev + cfg.test >= len(pool):
    raise ValueError(f"data.split: dev {cfg.dev} + test {cfg.test} questions leave none to "
                     f"train on ({len(pool)} distinct questions in {list(cfg.files)})")
  order = np.random.RandomState(cfg.seed).permutation(len(pool))
  shuffled = [pool[i] for i in order]
  return {"test": shuffled[:cfg.test], "dev": shuffled[cfg.test:cfg.test + cfg.dev],
          "train": shuffled[cfg.test + cfg.dev:]}


def merge_splits(drawn: dict, extra: dict) -> dict[str, list[dict]]:
  """`drawn` splits plus each split's own files (`extra`), keeping questions disjoint: a
  question of an extra dev or test file leaves the training split."""
  out = {s: list(drawn.get(s, [])) + list(extra.get(s, [])) for s in ("train", "dev", "test")}
  held = {question_key(r) for s in ("dev", "test") for r in out[s]}
  out["train"] = [r for r in out["train"] if question_key(r) not in held]
  return out


def check_splits(splits: Mapping[str, Sequence[dict]], sources: Mapping[str, Sequence[str]]) -> None:
  """No question twice in one split, none in two splits (by `question_key`); `sources`: the
  files each split came from, named in the error."""
  keys = {s: [question_key(r) for r in splits.get(s, ())] for s in ("train", "dev", "test")}
  src = {s: ", ".join(sources.get(s, ())) or "no file" for s in keys}
  for split, ks in keys.items():
    repeated = [k for k, n in Counter(ks).items() if n > 1]
    if repeated:
      raise ValueError(f"data: the {split} split holds {len(repeated)} question(s) more than "
                       f"once (e.g. {repeated[0]!r}), from {src[split]}; "
                       f"each question may be in it once")
  for a, b in (("dev", "test"), ("train", "dev"), ("train", "test")):
    shared = set(keys[a]) & set(keys[b])
    if shared:
      raise ValueError(f"data: {len(shared)} question(s) are in both the {a} split (from "
                       f"{src[a]}) and the {b} split (from {src[b]}), e.g. "
                       f"{sorted(shared)[0]!r}; the splits must be disjoint")
