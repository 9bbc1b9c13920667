"""Train / dev / test drawn from one pool of questions by a seed (ragjax.data.splits)."""

import numpy as np
import pytest

from ragjax.data.splits import SplitConfig, merge_splits, split_records


def recs(*questions):
  return [{"id": f"q{i}", "question": q, "golden_answers": ["a"]} for i, q in enumerate(questions)]


def test_split_is_disjoint_deterministic_and_deduplicated():
  pool = recs("A?", "B?", "C?", "D?", "E?", " a? ", "F?")     # " a? " repeats "A?"
  cfg = SplitConfig(files=("x",), dev=1, test=2, seed=3)
  s = split_records(pool, cfg)
  assert [len(s[k]) for k in ("train", "dev", "test")] == [3, 1, 2]
  qs = [r["question"] for k in ("train", "dev", "test") for r in s[k]]
  assert sorted(qs) == ["A?", "B?", "C?", "D?", "E?", "F?"]   # the first "A?" kept, once
  # by hand: ids sorted q0..q4, q6 (q5 dropped); RandomState(3).permutation(6) orders them
  order = np.random.RandomState(3).permutation(6)
  ids = ["q0", "q1", "q2", "q3", "q4", "q6"]
  assert [r["id"] for r in s["test"]] == [ids[i] for i in order[:2]]
  assert [r["id"] for r in s["dev"]] == [ids[order[2]]]
  assert split_records(list(reversed(pool[:5])) + pool[5:], cfg) == s   # file order is irrelevant
  assert split_records(pool, SplitConfig(files=("x",), dev=1, test=2, seed=4)) != s


def test_held_out_files_leave_training_and_bad_sizes_are_refused():
  drawn = {"train": recs("A?", "B?", "C?"), "dev": [], "test": []}
  merged = merge_splits(drawn, {"test": recs("b?"), "train": [], "dev": []})
  assert [r["question"] for r in merged["train"]] == ["A?", "C?"]
  assert [r["question"] for r in merged["test"]] == ["b?"]
  with pytest.raises(ValueError, match="leave none to train on"):
    split_records(recs("A?", "B?"), SplitConfig(dev=1, test=1))
  with pytest.raises(ValueError, match="data.split.test must be a non-negative integer"):
    SplitConfig(test=-1)


def test_splits_that_share_or_repeat_a_question_are_refused():
  """Issue 65: a test file that is the pool's own file put every dev question in test too."""
  from ragjax.data.splits import check_splits
  q = lambda text: {"id": text, "question": text, "golden_answers": ["a"]}  # noqa: E731
  src = {"train": ["t.jsonl"], "dev": ["d.jsonl"], "test": ["x.jsonl"]}
  check_splits({"train": [q("a")], "dev": [q("b")], "test": [q("c")]}, src)
  with pytest.raises(ValueError, match=r"test split holds 1 question\(s\) more than once .*'c'"):
    check_splits({"train": [q("a")], "dev": [q("b")], "test": [q("c"), q(" C ")]}, src)
  with pytest.raises(ValueError, match=r"both the dev split \(from d.jsonl\) and the test split "
                                       r"\(from x.jsonl\), e.g. 'b'"):
    check_splits({"train": [q("a")], "dev": [q("b")], "test": [q("B")]}, src)
  with pytest.raises(ValueError, match="both the train split"):
    check_splits({"train": [q("a")], "dev": [q("a")], "test": []}, src)
  with pytest.raises(ValueError, match=r"data.split.seed must be an integer in \[0, 2\*\*32\)"):
    SplitConfig(seed=2 ** 32)
  assert SplitConfig(seed=2 ** 32 - 1).seed == 2 ** 32 - 1
