"""The RL question pool (`pool.*`): questions whose search finds a gold answer as whole words,
through the real engine and a real BM25 index, minus the cold start's; and no held-out question
(test, dev, the `covered` suite) ever in it."""

import os

import pytest

import _rollout_helpers as h
from conftest import SHARED_DATA
from ragjax.metrics.answer import cover_exact_match, cover_word_match, normalize_answer
from ragjax.rl.question_pool import PoolConfig, question_pool

RECORDS = [
    {"id": "a", "question": "Who founded the Quillport Observatory?",
     "golden_answers": ["Mirela Dunst"]},
    {"id": "b", "question": "Which sea borders Zorbland?", "golden_answers": ["Glass Sea"]},
    {"id": "c", "question": "Who founded the Quillport Observatory in 1871?",
     "golden_answers": ["Mirela Dunst"]},
    # "Quill" is inside "Quillport" (a substring: cover EM finds it) but not a word of it
    {"id": "d", "question": "What is the capital of Zorbland?", "golden_answers": ["Quill"]},
    {"id": "e", "question": "What is the capital of Zorbland?", "golden_answers": ["Quillport"]},
]


def engine():
  return h.search_r1_teacher_engine()


def test_word_boundary_cover_match_by_hand():
  assert cover_exact_match("the capital is Quillport", ["Quill"]) == 1.0
  assert cover_word_match("the capital is Quillport", ["Quill"]) == 0.0
  assert cover_word_match("The capital is Quillport.", ["quillport"]) == 1.0
  assert cover_word_match("it was not so", ["no"]) == 0.0
  assert cover_word_match("no, it was not", ["No"]) == 1.0
  assert cover_word_match("anything", ["the"]) == 0.0      # an alias that normalises to ""


def test_pool_keeps_unseen_questions_whose_search_finds_the_answer_as_words():
  e = engine()
  pool, stats = question_pool(e, RECORDS, PoolConfig(retrievable=True, exclude_cold_start=True),
                              exclude=1, max_new_tokens=64, cache_length=2048)
  # a: the cold start's; b: the answer is not in the passage; d: only a substring
  assert [r["id"] for r in pool] == ["c", "e"]
  assert stats == {"training_questions": 5, "excluded": 1, "checked": 4, "retrievable": 2,
                   "pool": 2}
  # without the exclusion the cold start's question is back; max_questions stops the search
  pool, stats = question_pool(e, RECORDS, PoolConfig(retrievable=True, max_questions=1),
                              exclude=1, max_new_tokens=64, cache_length=2048)
  assert [r["id"] for r in pool] == ["a"] and stats["pool"] == 1

  # AutoRefine's protocol shows the passages in <documents>: the same questions qualify
  from ragjax.rollout.engine import RolloutEngine
  from ragjax.rollout.protocols import get_protocol
  refine = RolloutEngine(get_protocol("autorefine", top_k=1, max_turns=2), e.sampler,
                         e.retriever, e.tokenizer)
  pool, _ = question_pool(refine, RECORDS, PoolConfig(retrievable=True, exclude_cold_start=True),
                          exclude=1, max_new_tokens=64, cache_length=2048)
  assert [r["id"] for r in pool] == ["c", "e"]


def test_pool_config_errors():
  with pytest.raises(ValueError, match="pool.pass_k=1"):
    PoolConfig(pass_k=1)
  with pytest.raises(ValueError, match="pool.max_questions must be >= 0"):
    PoolConfig(max_questions=-2)


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data")
def test_no_held_out_question_can_enter_the_smollm2_training_pool():
  """The pool narrows the training split; that split shares no question with the config's
  test and dev splits, nor with the `covered` suite's 2Wiki and MuSiQue questions (its
  HotpotQA column is the run's own test split)."""
  from ragjax.data.musique import read_musique
  from ragjax.data.readers import read_records
  from ragjax.data.splits import split_records
  from ragjax.wiring.components import split_config
  from ragjax.wiring.config_files import load_config
  c = load_config("configs/smollm2.py")
  records = [r for f in c.data.split.files for r in read_records(f)]
  splits = split_records(records, split_config(c))
  key = lambda r: normalize_answer(r["question"])            # noqa: E731
  train = {key(r) for r in splits["train"]}
  held = {key(r) for r in splits["test"] + splits["dev"]}
  held |= {key(r) for r in read_records(os.path.join(
      SHARED_DATA, "flashrag_format", "derived_2wikimultihopqa_dev_with_context_164.jsonl"))}
  held |= {normalize_answer(e.question) for e in read_musique(
      os.path.join(SHARED_DATA, "musique", "hipporag_musique_train_100.json"))}
  assert len(splits["test"]) == 400 and len(splits["dev"]) == 100 and len(held) > 600
  assert train and not train & held
