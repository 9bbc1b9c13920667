"""Importers on small generated files in each source format, and errors on bad input that
name the file, the line or record, and the field; the reader (`read_examples`) as the path the
recipes read question files through, and the TFDS export holding the same rows."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragjax.data.choice import read_multiple_choice
from ragjax.data.corpus_builder import CorpusBuilder, passage_id
from ragjax.data.flashrag import read_flashrag
from ragjax.data.hotpotqa import read_hotpotqa
from ragjax.data.mathsets import read_math
from ragjax.data.musique import read_musique
from ragjax.data.readers import as_record, read_examples
from ragjax.data.schema import DataError
from ragjax.data.twowiki import read_twowiki
from ragjax.data.verl import read_verl


def _jsonl(path, records):
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
  return str(path)


def _raises(fn, *parts):
  with pytest.raises(DataError) as info:
    list(fn())
  for part in parts:
    assert part in str(info.value), (part, str(info.value))
  return info.value


def test_flashrag_reads_records_and_metadata(tmp_path):
  p = _jsonl(tmp_path / "nq.jsonl", [
      {"id": "a", "question": "who?", "golden_answers": ["X", "Y", "X"]},
      {"id": 7, "question": "when?", "golden_answers": [1999],
       "metadata": {"options": ["p", "q"], "supporting_titles": ["T"], "data_source": "mine", "k": 1}}])
  a, b = read_flashrag(p)
  assert (a.id, a.question, a.golden_answers, a.data_source) == ("a", "who?", ("X", "Y"), "nq")
  assert (b.id, b.golden_answers, b.options, b.supporting_titles, b.data_source, dict(b.metadata)) == (
      "7", ("1999",), ("p", "q"), ("T",), "mine", {"k": 1})


def test_flashrag_bad_input_names_file_line_field(tmp_path):
  good = {"id": "a", "question": "q?", "golden_answers": ["x"]}
  cases = [
      ({"id": "b", "question": "q?"}, ["line 2", "'golden_answers'", "missing"]),
      ({"id": "b", "question": "q?", "golden_answers": []}, ["line 2", "'golden_answers'", "empty"]),
      ({"id": "b", "question": "q?", "golden_answers": [""]}, ["line 2", "'golden_answers[0]'", "empty"]),
      ({"id": "b", "question": 5, "golden_answers": ["x"]}, ["line 2", "'question'", "expected a string, got int"]),
      ({"id": "b", "question": "  ", "golden_answers": ["x"]}, ["line 2", "'question'", "empty"]),
      ({"id": "b", "question": "q", "golden_answers": [["x"]]}, ["line 2", "'golden_answers[0]'", "got list"]),
      ({"id": "b", "question": "q", "golden_answers": ["x"], "metadata": [1]}, ["line 2", "'metadata'"]),
  ]
  for i, (bad, parts) in enumerate(cases):
    p = _jsonl(tmp_path / f"bad{i}.jsonl", [good, bad])
    _raises(lambda: read_flashrag(p), p, *parts)


def test_invalid_utf8_and_json_are_located(tmp_path):
  p = tmp_path / "utf8.jsonl"
  p.write_bytes(b'{"id": "a", "question": "ok", "golden_answers": ["x"]}\n\n'
                b'{"id": "b", "question": "caf\xe9 \xff?", "golden_answers": ["x"]}\n')
  err = _raises(lambda: read_flashrag(str(p)), str(p), "line 3", "'question'", "invalid UTF-8")
  assert err.field == "question"
  p2 = tmp_path / "ans.jsonl"
  p2.write_bytes(b'{"id": "a", "question": "q", "golden_answers": ["ok", "b\xc3"]}\n')
  _raises(lambda: read_flashrag(str(p2)), "line 1", "golden_answers[1]", "invalid UTF-8")
  p3 = tmp_path / "json.jsonl"
  p3.write_text('{"id": "a", "question": "q", "golden_answers": ["x"]}\n{"id": "b",\n')
  _raises(lambda: read_flashrag(str(p3)), str(p3), "line 2", "invalid JSON")
  p4 = tmp_path / "list.json"
  p4.write_bytes(b'[{"_id": "a", "question": "q", "answer": "x"},\n {"_id": "b", "question": "\xfe", "answer": "x"}]')
  _raises(lambda: read_hotpotqa(str(p4)), str(p4), "record 1", "'question'", "invalid UTF-8")


def test_verl_parquet_shapes_and_errors(tmp_path):
  rows = [
      {"data_source": "nq", "prompt": [{"role": "user", "content": "q one?"}],
       "reward_model": {"ground_truth": "a, b", "style": "rule"},
       "extra_info": {"question": "q one?", "answer": ["a, b"], "index": 3, "split": "test"}},
      {"data_source": "nq", "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q two?"}],
       "reward_model": {"ground_truth": "y", "style": "rule"},
       "extra_info": {"question": None, "answer": None, "index": None, "split": "test"}},
  ]
  path = str(tmp_path / "nq.parquet")
  pq.write_table(pa.Table.from_pylist(rows), path)
  a, b = read_verl(path)
  assert (a.id, a.question, a.golden_answers, a.data_source) == ("nq_3", "q one?", ("a, b",), "nq")
  assert (b.id, b.question, b.golden_answers) == ("nq_1", "q two?", ("y",))
  target = str(tmp_path / "sr1.parquet")  # Search-R1's own layout: ground_truth = {target: [...]}
  pq.write_table(pa.Table.from_pylist([{"data_source": "hotpot", "prompt": [{"role": "user", "content": "Q?"}],
                                        "reward_model": {"ground_truth": {"target": ["u", "v"]}}}]), target)
  (c,) = read_verl(target)
  assert c.golden_answers == ("u", "v") and c.id == "sr1_0"
  bad = str(tmp_path / "bad.parquet")
  pq.write_table(pa.Table.from_pylist([rows[0], {"data_source": "nq", "prompt": [{"role": "user", "content": "x"}],
                                                 "reward_model": {"ground_truth": None, "style": "rule"}}]), bad)
  _raises(lambda: read_verl(bad), bad, "row 1", "reward_model.ground_truth", "missing")


def _hotpot_official():
  return {"_id": "h1", "question": "Which town is Bo from?", "answer": "Ka", "type": "bridge", "level": "hard",
          "supporting_facts": [["Bo", 0], ["Ka", 1]],
          "context": [["Bo", ["Bo is a man.", " He lives in Ka."]], ["Ka", ["Ka is a town.", " It is old."]],
                      ["Zed", ["Zed is other."]]]}


def test_hotpotqa_three_layouts_and_corpus(tmp_path):
  off = _hotpot_official()
  hf = {"id": "h2", "question": "Q2?", "answer": "yes", "type": "comparison", "level": "easy",
        "supporting_facts": {"title": ["Ka"], "sent_id": [0]},
        "context": {"title": ["Ka", "Mo"], "sentences": [["Ka is a town.", " It is old."], ["Mo.", " Mo too."]]}}
  ircot = {"question_id": "h3", "question_text": "Q3?",
           "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["Ka"]}],
           "contexts": [{"id": "0", "title": "Bo", "paragraph_text": "Bo is a man.  He lives in Ka.", "is_supporting": True}]}
  p = _jsonl(tmp_path / "hotpot.jsonl", [off, hf, ircot])
  corpus = CorpusBuilder()
  a, b, c = read_hotpotqa(p, corpus=corpus)
  passages = {x.id: x for x in corpus.passages()}
  assert [x.title for x in corpus.passages()] == ["Bo", "Ka", "Zed", "Mo"]  # de-duplicated
  assert passages[passage_id("Bo", "Bo is a man. He lives in Ka.")].contents == '"Bo"\nBo is a man. He lives in Ka.'
  assert a.supporting_titles == ("Bo", "Ka") and [passages[i].title for i in a.supporting_ids] == ["Bo", "Ka"]
  assert (a.golden_answers, a.metadata["type"]) == (("Ka",), "bridge")
  assert b.supporting_ids == (passage_id("Ka", "Ka is a town. It is old."),)
  assert c.supporting_ids == a.supporting_ids[:1] and c.golden_answers == ("Ka",)
  bad = dict(off, context=[["Bo", "not a list"]])
  p2 = _jsonl(tmp_path / "bad.jsonl", [off, bad])
  _raises(lambda: read_hotpotqa(p2), p2, "line 2", "'context[0]'")
  p3 = _jsonl(tmp_path / "bad2.jsonl", [dict(off, answer="")])
  _raises(lambda: read_hotpotqa(p3), p3, "line 1", "'answer[0]'", "empty")


def test_twowiki_and_musique(tmp_path):
  tw = dict(_hotpot_official(), _id="t1", type="compositional", evidences=[["Bo", "home", "Ka"]],
            context=[["Bo", ["Bo is a man.", "He lives in Ka."]]], supporting_facts=[["Bo", 1]])
  p = tmp_path / "2wiki.json"
  p.write_text(json.dumps([tw]))
  (t,) = read_twowiki(str(p))
  assert t.data_source == "2wikimultihopqa" and t.metadata["evidences"] == [["Bo", "home", "Ka"]]
  assert t.supporting_ids == (passage_id("Bo", "Bo is a man. He lives in Ka."),)
  mq = {"id": "2hop__1_2", "question": "Who?", "answer": "G. Hall", "answer_aliases": ["Hall"], "answerable": True,
        "paragraphs": [{"idx": 0, "title": "A", "paragraph_text": "A text.", "is_supporting": False},
                       {"idx": 1, "title": "B", "paragraph_text": "B text.", "is_supporting": True}],
        "question_decomposition": [{"id": 1, "question": "q1", "answer": "B", "paragraph_support_idx": 1}]}
  lag = {"id": "2hop__3_4", "question": "Who else?", "answer": "Z", "answer_aliases": [], "answerable": True,
         "question_decomposition": [{"id": 3, "question": "x >> y", "answer": "Y", "document_id": "Green (album)_0"},
                                    {"id": 4, "question": "#1 >> z", "answer": "Z", "document_id": "Z_12"}]}
  p2 = tmp_path / "musique.json"
  p2.write_text(json.dumps([mq, lag]))
  a, b = read_musique(str(p2))
  assert a.golden_answers == ("G. Hall", "Hall") and a.supporting_titles == ("B",)
  assert a.supporting_ids == (passage_id("B", "B text."),)
  assert b.supporting_titles == ("Green (album)", "Z") and b.supporting_ids == ()
  p3 = tmp_path / "bad.json"
  p3.write_text(json.dumps([dict(mq, answer_aliases="Hall", paragraphs={"x": 1})]))
  _raises(lambda: read_musique(str(p3)), str(p3), "record 0", "'paragraphs'")


def test_multiple_choice_letters_and_errors(tmp_path):
  mmlu = {"question_id": 11, "question": "Pick?", "options": ["a", "b", "c"], "answer": "C", "answer_index": 2,
          "category": "law"}
  medqa = {"question": "Dx?", "options": {"A": "flu", "B": "cold"}, "answer": "cold", "answer_idx": "B"}
  p = _jsonl(tmp_path / "mc.jsonl", [mmlu, medqa])
  a, b = read_multiple_choice(p)
  assert (a.id, a.golden_answers, a.options, a.metadata["answer_text"]) == ("mc_11", ("C",), ("a", "b", "c"), "c")
  assert (b.golden_answers, b.options, b.metadata["answer_index"]) == (("B",), ("flu", "cold"), 1)
  for i, (bad, parts) in enumerate([
      (dict(mmlu, answer="D"), ["'answer'", "expected one of 'ABC'"]),
      (dict(mmlu, answer_index=1), ["'answer_index'", "disagrees"]),
      (dict(medqa, answer="fever"), ["'answer'", "is not option B"]),
      (dict(mmlu, options="abc"), ["'options'", "expected 2..26"]),
      ({k: v for k, v in mmlu.items() if k != "answer"}, ["'answer'", "missing"])]):
    p = _jsonl(tmp_path / f"bad{i}.jsonl", [mmlu, bad])
    _raises(lambda: read_multiple_choice(p), p, "line 2", *parts)


def test_math_final_answers(tmp_path):
  p = _jsonl(tmp_path / "gsm.jsonl", [
      {"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7\nSo 1,007 in all.\n#### 1,007"},
      {"problem": "Solve.", "answer": "\\frac{1}{2}", "unique_id": "test/x/1.json", "level": 3}])
  a, b = read_math(p)
  assert a.golden_answers == ("1,007", "1007") and "####" in a.metadata["solution"]
  assert (b.id, b.golden_answers, b.metadata["level"]) == ("gsm_test/x/1.json", ("\\frac{1}{2}",), 3)
  p2 = _jsonl(tmp_path / "bad.jsonl", [{"question": "Q", "answer": "7 #### "}])
  _raises(lambda: read_math(p2), p2, "line 1", "'answer'", "empty final answer")


def test_builders_reject_duplicate_ids_and_unknown_splits(tmp_path):
  import tensorflow_datasets as tfds
  from ragjax.data.builders import FilesConfig, RagjaxFlashrag
  from ragjax.data.load import load_split
  tfds.disable_progress_bar()
  one = _jsonl(tmp_path / "one.jsonl", [{"id": "a", "question": "q?", "golden_answers": ["x"]}])
  two = _jsonl(tmp_path / "two.jsonl", [{"id": "b", "question": "r?", "golden_answers": ["y"]},
                                        {"id": "a", "question": "s?", "golden_answers": ["z"]}])
  b = RagjaxFlashrag(config=FilesConfig(name="dup", files={"test": [one, two]}), data_dir=str(tmp_path / "t1"))
  with pytest.raises(Exception) as info:
    b.download_and_prepare()
  assert "two.jsonl example 1" in str(info.value) and "duplicate id 'a'" in str(info.value)
  assert "one.jsonl example 0" in str(info.value)
  ok = RagjaxFlashrag(config=FilesConfig(name="ok", files={"dev": [one], "test": [two]},
                                         data_source="custom"), data_dir=str(tmp_path / "t2"))
  ok.download_and_prepare()
  rows = load_split(ok, "test")
  assert [r["id"] for r in rows] == ["b", "a"] and rows[0]["data_source"] == "custom"
  assert rows[-1] == {"id": "a", "question": "s?", "golden_answers": ["z"], "options": [], "supporting_ids": [],
                      "supporting_titles": [], "data_source": "custom", "metadata": {}}
  with pytest.raises(KeyError, match="no split 'train'"):
    load_split(ok, "train")
  bad = _jsonl(tmp_path / "bad.jsonl", [{"id": "a", "question": "q?", "golden_answers": "  "}])
  b3 = RagjaxFlashrag(config=FilesConfig(name="bad", files={"test": [bad]}), data_dir=str(tmp_path / "t3"))
  with pytest.raises(Exception) as info:
    b3.download_and_prepare()
  assert "bad.jsonl line 1" in str(info.value) and "golden_answers[0]" in str(info.value)


def test_records_round_trip_and_prepared_directory_loads(tmp_path):
  import tensorflow_datasets as tfds
  from ragjax.data.builders import FilesConfig, RagjaxMultipleChoice
  from ragjax.data.load import load_split
  from ragjax.data.schema import example_from_record
  tfds.disable_progress_bar()
  p = _jsonl(tmp_path / "mc.jsonl", [{"question_id": 1, "question": "Pick?", "options": ["a", "b"],
                                      "answer": "B", "answer_index": 1}])
  b = RagjaxMultipleChoice(config=FilesConfig(name="mc", files={"test": [p]}), data_dir=str(tmp_path / "t"))
  b.download_and_prepare()
  rows = load_split(b.data_dir, "test")  # a prepared directory needs no builder class
  (ex,) = read_multiple_choice(p)
  assert example_from_record(rows[0]) == ex
  # the export holds exactly what the reader gives the recipes
  assert list(rows) == [as_record(e) for e in read_examples(p, "mcq")]
  with pytest.raises(DataError, match="'golden_answers': empty list"):
    example_from_record(dict(rows[0], golden_answers=[]), "row 0")


def test_deep_nesting_lone_surrogates_and_directories_are_data_errors(tmp_path):
  good = '{"id": "a", "question": "q", "golden_answers": ["x"]}\n'
  p = tmp_path / "deep.jsonl"
  p.write_text(good + "[" * 100000 + "]" * 100000 + "\n")
  _raises(lambda: read_flashrag(str(p)), str(p), "line 2", "nested deeper")
  p2 = tmp_path / "surrogate.jsonl"
  p2.write_text(good + '{"id": "b", "question": "q \\udfff", "golden_answers": ["x"]}\n')
  err = _raises(lambda: read_flashrag(str(p2)), str(p2), "line 2", "lone surrogate U+DFFF")
  assert err.field == "question"
  p3 = tmp_path / "list.json"
  p3.write_text('[{"_id": "a", "question": "q", "answer": "x"},\n' + "[" * 50000 + "]" * 50000 + "]")
  _raises(lambda: read_hotpotqa(str(p3)), str(p3), "line 2", "nested deeper")
  p4 = tmp_path / "musique.json"
  p4.write_text(json.dumps([{"id": "m", "question": "q", "answer": "x", "paragraphs": [{"title": 5}]}]))
  _raises(lambda: read_musique(str(p4)), str(p4), "record 0", "'paragraphs[0].title'")
  _raises(lambda: read_flashrag(str(tmp_path)), str(tmp_path), "is a directory")


def test_the_recipes_read_question_files_through_read_examples(tmp_path):
  """The data path every recipe takes (`components.load_data`, data.source="files"; UR²'s task
  files): `readers.read_examples` on the user's files, no prepared copy; a bad record stops it
  with the reader's error naming the file, line and field."""
  import sys
  from ragjax.recipes.ur2 import read_task_files
  from ragjax.wiring.components import load_data
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "configs"))
  import common
  train = _jsonl(tmp_path / "train.jsonl", [{"id": "a", "question": "q?", "golden_answers": ["x"]},
                                            {"id": "b", "question": "r?", "golden_answers": ["y"],
                                             "metadata": {"level": 2}}])
  dev = _jsonl(tmp_path / "dev.jsonl", [{"id": "c", "question": "s?", "golden_answers": ["z"]}])
  c = common.get_config()
  c.data.update(dict(source="files", train_files=(train,), dev_files=(dev,)))
  setup = load_data(c, str(tmp_path), retriever=False)
  assert setup.splits == {"train": [as_record(e) for e in read_examples(train)],
                          "dev": [as_record(e) for e in read_examples(dev)], "test": []}
  assert setup.splits["train"][1]["metadata"] == {"level": 2}
  assert read_task_files([f"qa:flashrag:{dev}"]) == [dict(as_record(e), task="qa")
                                                     for e in read_examples(dev)]
  bad = _jsonl(tmp_path / "bad.jsonl", [{"id": "d", "question": "t?", "golden_answers": []}])
  c.data.train_files = (train, bad)
  _raises(lambda: load_data(c, str(tmp_path), retriever=False), bad, "line 1", "golden_answers")
