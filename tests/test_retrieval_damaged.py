"""A damaged index directory (issue 56: interrupted writes) is one error naming the index,
never `Not an Arrow file` or `mmap length is greater than file size` without a path; an
`index.json` without a known `backend`, or not JSON, names the file."""

import json
import os

import pytest

from _retrieval_helpers import small_corpus, write_jsonl
from ragjax.retrieval import open_index
from ragjax.retrieval.index import build_index


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("idx")
  corpus = write_jsonl(str(d / "corpus.jsonl"), small_corpus(40))
  build_index(corpus, str(d / "index"), backend="bm25", progress=False)
  return str(d / "index")


def copy_with(src: str, dst: str, cut: str = "", keep: float = 0.5, meta=None) -> str:
  import shutil
  shutil.copytree(src, dst)
  if cut:
    files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(dst, cut)) for f in fs] \
        if os.path.isdir(os.path.join(dst, cut)) else [os.path.join(dst, cut)]
    path = max(files, key=os.path.getsize)
    with open(path, "r+b") as f:
      f.truncate(int(os.path.getsize(path) * keep))
  if meta is not None:
    with open(os.path.join(dst, "index.json"), "w") as f:
      f.write(meta if isinstance(meta, str) else json.dumps(meta))
  return dst


def test_a_damaged_index_names_itself(bm25_dir, tmp_path):
  assert open_index(bm25_dir).search(["who"], 1)            # the intact one serves
  for name, kw, match in (
      ("store", dict(cut="passages.arrow"), "is damaged"),
      ("bm25", dict(cut="bm25"), "is damaged"),
      ("json", dict(meta='{"backend": "bm2'), "not a JSON index record"),
      ("nobackend", dict(meta={"n": 3}), "'backend' must be one of"),
      ("list", dict(meta=["bm25"]), "'backend' must be one of")):
    d = copy_with(bm25_dir, str(tmp_path / name), **kw)
    with pytest.raises(ValueError, match=match) as e:
      open_index(d)
    assert d in str(e.value), str(e.value)
