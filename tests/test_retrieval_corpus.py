"""Corpus ingestion (every accepted format, bad lines by file:line) and the Arrow passage store."""

import json
import os

import pytest

from _retrieval_helpers import small_corpus, write_jsonl
from conftest import SHARED_DATA
from ragjax.retrieval.corpus_reader import CorpusError, IngestReport, read_passages
from ragjax.retrieval.store import PassageStore, write_store
from ragjax.retrieval.types import Hit, split_contents


def test_flashrag_contents_and_title_text(tmp_path):
  path = write_jsonl(tmp_path / "c.jsonl", [
      {"id": "a", "contents": '"Alpha"\nFirst text.'},
      {"id": 7, "title": "Beta", "text": "Second text."},
      {"id": "c", "contents": "no title line here"}])
  ps = list(read_passages(str(path)))
  assert [(p.id, p.title, p.text) for p in ps] == [
      ("a", "Alpha", "First text."), ("7", "Beta", "Second text."), ("c", "", "no title line here")]
  assert ps[0].contents == '"Alpha"\nFirst text.'
  assert split_contents(ps[1].contents) == ("Beta", "Second text.")


def test_json_list_without_ids_gets_row_ids(tmp_path):
  path = tmp_path / "hippo.json"
  path.write_text(json.dumps([{"title": "T1", "text": "x"}, {"title": "T2", "text": "y"}]))
  assert [(p.id, p.title) for p in read_passages(str(path))] == [("0", "T1"), ("1", "T2")]


def test_qa_paragraph_formats_are_merged_and_deduplicated(tmp_path):
  hotpot = [{"_id": "q1", "question": "?", "answer": "a", "supporting_facts": [["A", 0]],
             "context": [["A", ["Alpha one.", " Alpha two."]], ["B", ["Beta."]]]},
            {"_id": "q2", "question": "?", "answer": "b", "supporting_facts": [["B", 0]],
             "context": [["B", ["Beta."]], ["C", ["Gamma."]]]}]
  (tmp_path / "hotpot.json").write_text(json.dumps(hotpot))
  wiki2 = [{"_id": "w", "question": "?", "answer": "x", "context": [["D", ["Delta a.", "Delta b."]]]}]
  (tmp_path / "2wiki.json").write_text(json.dumps(wiki2))
  hf = {"id": "h", "question": "?", "answer": "x",
        "context": {"title": ["E"], "sentences": [["Eps one.", " Eps two."]]}}
  musique = {"id": "m", "question": "?", "answer": "x",
             "paragraphs": [{"idx": 0, "title": "F", "paragraph_text": "Phi  text.", "is_supporting": True}]}
  flash = {"id": "f", "question": "?", "golden_answers": ["x"],
           "metadata": {"context": [["G", ["Gee."]], ["A", ["Alpha one.", " Alpha two."]]]}}
  write_jsonl(tmp_path / "rows.jsonl", [hf, musique, flash])
  report = IngestReport()
  ps = list(read_passages([str(tmp_path / "hotpot.json"), str(tmp_path / "2wiki.json"),
                           str(tmp_path / "rows.jsonl")], report=report))
  by_title = {p.title: p.text for p in ps}
  assert by_title == {"A": "Alpha one. Alpha two.", "B": "Beta.", "C": "Gamma.",
                      "D": "Delta a. Delta b.", "E": "Eps one. Eps two.", "F": "Phi text.", "G": "Gee."}
  assert len({p.id for p in ps}) == len(ps) == 7
  assert report.merged_paragraphs == 2        # B again in q2, A again in the FlashRAG record
  assert not report.issues


def test_malformed_and_duplicate_lines_are_reported_with_file_and_line(tmp_path):
  rows = [{"id": "a", "contents": "x"}, {"id": "b", "contents": 5}, {"id": "a", "contents": "dup"},
          {"id": "c", "foo": 1}, {"id": "d", "contents": "fine"}, {"id": "e", "title": "T", "text": "   "}]
  path = str(write_jsonl(tmp_path / "bad.jsonl", rows, raw_lines={2: '{"id": "broken", '}))
  report = IngestReport()
  ps = list(read_passages(path, on_error="skip", report=report))
  assert [p.id for p in ps] == ["a", "d"]
  got = [(i.line, i.kind) for i in report.issues]
  assert got == [(2, "malformed"), (3, "malformed"), (4, "duplicate_id"), (5, "malformed"),
                 (7, "malformed")]
  assert all(i.file == path for i in report.issues)
  assert "'contents' must be a string" in report.issues[0].message
  assert str(report.issues[1]).startswith(f"{path}:3: malformed: invalid JSON")
  assert "'id' already seen" in str(report.issues[2]) or "already seen" in report.issues[2].message
  with pytest.raises(CorpusError, match=r"bad\.jsonl:2: malformed: field 'contents' must be a string"):
    list(read_passages(path, on_error="fail"))


def test_non_utf8_file_is_reported(tmp_path):
  path = tmp_path / "latin1.jsonl"
  path.write_bytes(b'{"id": "a", "contents": "ok"}\n{"id": "b", "contents": "caf\xe9"}\n')
  report = IngestReport()
  assert [p.id for p in read_passages(str(path), report=report)] == ["a"]
  assert report.issues[0].line == 2 and "UTF-8" in report.issues[0].message


def test_store_random_access_and_non_ascii_roundtrip(tmp_path):
  rows = small_corpus(50)
  path = write_jsonl(tmp_path / "c.jsonl", rows)
  n = write_store(read_passages(str(path)), str(tmp_path / "idx"), batch=16)
  store = PassageStore(str(tmp_path / "idx"))
  assert n == len(store) == len(rows)
  for r in (rows[0], rows[17], rows[-1], rows[-2]):
    p = store.get(r["id"])
    assert p.contents == r["contents"]
  rows_ix = [len(rows) - 2, 3]
  hits = store.hits(__import__("numpy").array([rows_ix + [-1]]), __import__("numpy").array([[2.0, 1.0, 0.0]]))
  assert hits == [[Hit("u2", rows[-2]["contents"], 2.0), Hit("p3", rows[3]["contents"], 1.0)]]
  assert hits[0][0].title == "東京タワー"
  with pytest.raises(KeyError, match="nope"):
    store.row_of("nope")


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data not present")
def test_shared_corpus_head_parses():
  path = os.path.join(SHARED_DATA, "corpus", "derived_multihop_wiki_passages_31144.jsonl")
  if not os.path.exists(path):
    pytest.skip("31k corpus not present")
  report = IngestReport()
  ps = []
  for p in read_passages(path, report=report):
    ps.append(p)
    if len(ps) == 300:
      break
  assert len(ps) == 300 and not report.issues
  assert ps[0].id == "0" and ps[0].title == "The Old Maid and the Thief"


def _hostile_lines():
  """Records from the audit (issue 28 #7) and their neighbours, each with what it must report."""
  return [
      ('\ufeff{"id": "a", "contents": "fine"}', None),                 # byte-order mark: still read
      ('{"paragraphs": 5}', "field 'paragraphs': expected a list, got int"),
      ('{"context": {"title": 1, "sentences": 2}}', "field 'context': expected {title"),
      ("[" * 100000 + "]" * 100000, "nested deeper than the parser's recursion limit"),
      ('{"id": "b", "contents": "x\\ud800y"}', "field 'contents': lone surrogate U+D800"),
      ('{"contexts": [{"title": "T", "paragraph_text": 7}]}',
       "field 'contexts[0].paragraph_text': expected a string, got int"),
      ('{"id": "c", "contents": "ok", "n": ' + "9" * 5000 + "}", "4300 digits"),
      ('{"paragraphs": [{"title": "P", "paragraph_text": "Para  text."}]}', None),
      ('{"context": [["H", ["One.", " Two."]]], "metadata": 3}', None),
  ]


def test_malformed_and_hostile_records_cost_only_themselves(tmp_path):
  lines = _hostile_lines()
  path = tmp_path / "hostile.jsonl"
  path.write_text("\n".join(text for text, _ in lines) + "\n", encoding="utf-8")
  report = IngestReport()
  ps = list(read_passages(str(path), report=report))
  assert [(p.title, p.text) for p in ps] == [("", "fine"), ("P", "Para text."), ("H", "One. Two.")]
  expected = [(i + 1, says) for i, (_, says) in enumerate(lines) if says]
  assert [i.line for i in report.issues] == [line for line, _ in expected]
  for issue, (_, says) in zip(report.issues, expected):
    assert issue.kind == "malformed" and says in issue.message, (issue, says)
  assert write_store(ps, str(tmp_path / "idx")) == 3               # Arrow takes what was kept
  with pytest.raises(CorpusError, match=r"hostile\.jsonl:2: malformed: field 'paragraphs'"):
    list(read_passages(str(path), on_error="fail"))


def test_json_list_records_know_their_lines_and_a_deep_element_ends_the_file(tmp_path):
  path = tmp_path / "list.json"
  path.write_text('[\n {"id": "a", "text": "x"},\n {"id": 1.5, "text": "y"},\n ' + "[" * 50000
                  + "]" * 50000 + ',\n {"id": "c", "text": "z"}\n]\n')
  report = IngestReport()
  assert [p.id for p in read_passages(str(path), report=report)] == ["a"]
  assert [(i.line, i.message) for i in report.issues] == [
      (3, "field 'id' must be a string or int, got float"),
      (4, "invalid JSON (nested deeper than the parser's recursion limit)")]
