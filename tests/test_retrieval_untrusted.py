"""Downloaded index directories: a pickle inside is refused unless the user opts in."""

import os
import pickle

import numpy as np
import pytest

from _retrieval_helpers import clustered_vectors, run_module, small_corpus, write_jsonl
from ragjax.retrieval.index import build_index
from ragjax.retrieval.scann_index import ScannConfig, ScannIndex
from ragjax.retrieval.trust import UntrustedIndexError


class _Payload:
  """Unpickling this makes a directory: visible proof that loading the file ran code."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.mkdir, (self.marker,))


def _plant(directory, marker):
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, "scann_docids.pkl")
  with open(path, "wb") as f:
    pickle.dump(_Payload(str(marker)), f)
  return path


def test_scann_load_refuses_a_pickle_unless_allowed(tmp_path):
  db, _ = clustered_vectors(300, 16, 4)
  index = ScannIndex.build(db, ScannConfig())
  index.save(str(tmp_path / "scann"))
  rows, _ = index.search(db[:3], 5)
  marker = tmp_path / "code_ran"
  planted = _plant(str(tmp_path / "scann"), marker)
  with pytest.raises(UntrustedIndexError) as e:
    ScannIndex.load(str(tmp_path / "scann"))
  assert planted in str(e.value) and "allow_pickle=True" in str(e.value)
  assert "\n" not in str(e.value)
  assert not marker.exists()                     # refused before anything was unpickled
  loaded = ScannIndex.load(str(tmp_path / "scann"), allow_pickle=True)
  assert marker.exists()                         # the opt-in really loads it (so it is dangerous)
  np.testing.assert_array_equal(loaded.search(db[:3], 5)[0], rows)


def test_command_lines_refuse_an_index_with_a_pickle(tmp_path):
  corpus = write_jsonl(tmp_path / "c.jsonl", small_corpus(30))
  index_dir = tmp_path / "idx"
  build_index(str(corpus), str(index_dir), "bm25", progress=False)
  marker = tmp_path / "code_ran"
  planted = _plant(str(index_dir / "scann"), marker)
  questions = tmp_path / "q.jsonl"
  write_jsonl(questions, [{"id": "q", "question": "Qessa astronomy", "golden_answers": ["x"]}])
  for cli in (("ragjax.retrieval.evaluate", "--questions", str(questions)),
              ("ragjax.retrieval.server", "--port", "0")):
    r = run_module(*cli, "--index", str(index_dir))
    assert r.returncode == 2, (cli, r.stderr)
    assert planted in r.stderr and "--allow-pickle" in r.stderr and "Traceback" not in r.stderr
  r = run_module("ragjax.retrieval.evaluate", "--questions", str(questions), "--index", str(index_dir),
           "--allow-pickle")
  assert r.returncode == 0, r.stderr
  assert not marker.exists()                     # a BM25 index never reads scann/
