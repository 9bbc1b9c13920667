"""Issue 65: every cache a recipe writes under its workdir (an evaluation in `eval/*.json`, a
cold start's record and policy, the index built from the corpus) is checked on read; a damaged
one (an interrupted write: bad JSON or UTF-8, a cut file, the wrong shape) is set aside as
`<path>.damaged` with one line naming it, and recomputed, never a traceback or an error that
names no file.  `test_recipe_smollm2.py` runs the same through the real command."""

import json
import os

import pytest

from ragjax.recipes.qa import STATS, valid_stats
from ragjax.wiring import components as parts

GOOD_STATS = {k: [1.0, None] for k in STATS}


def write(path, data: bytes):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)


@pytest.mark.parametrize("name,data", [
    ("a list", b"[]"),
    ("stats a string", json.dumps({"key": 1, "stats": "x"}).encode()),
    ("stats of another length", json.dumps({"key": 1, "stats": {k: [1.0] for k in STATS}}).encode()),
    ("bad JSON", b'{"key": 1, "stats": {"em": [1'),
    ("bad UTF-8", b'{"key": "\xff\xfe"}'),
    ("a directory", None),
])
def test_a_damaged_evaluation_is_set_aside_with_one_line(tmp_path, capsys, name, data):
  path = str(tmp_path / "eval" / "untrained_+_search.json")
  if data is None:
    os.makedirs(path)
  else:
    write(path, data)
  got = parts.read_cache(path, lambda d: "key" in d and valid_stats(d.get("stats"), 2))
  assert got is None, name
  assert not os.path.exists(path) and os.path.exists(path + ".damaged")
  lines = [l for l in capsys.readouterr().out.splitlines() if "damaged" in l]
  assert len(lines) == 1 and path in lines[0] and "recomputing" in lines[0], lines


def test_an_intact_evaluation_is_read_and_an_older_damaged_one_replaced(tmp_path, capsys):
  path = str(tmp_path / "eval" / "x.json")
  write(path + ".damaged", b"old")
  write(path, json.dumps({"key": 1, "stats": GOOD_STATS}).encode())
  assert parts.read_cache(path, lambda d: valid_stats(d["stats"], 2))["stats"] == GOOD_STATS
  write(path, b"[")
  assert parts.read_cache(path) is None
  assert open(path + ".damaged").read() == "["
  assert parts.read_cache(str(tmp_path / "absent.json")) is None
  assert valid_stats(GOOD_STATS, 2) and not valid_stats(GOOD_STATS, 3)
  assert not valid_stats({**GOOD_STATS, "em": ["x", 1]}, 2)


def test_a_stale_result_is_kept_as_stale_not_called_damaged(tmp_path, capsys):
  """A comparison row evaluated with another policy is intact, only out of date: kept aside as
  `.stale` (an older one replaced), with a line that says so."""
  out = str(tmp_path / "eval" / "smollm2")
  write(os.path.join(out + ".stale", "old"), b"older")
  write(os.path.join(out, "compare_eval.json"), b"{}")
  parts.set_aside(out, "evaluated with another policy", stale=True)
  assert not os.path.exists(out) and not os.path.exists(out + ".damaged")
  assert os.listdir(out + ".stale") == ["compare_eval.json"]
  (line,) = capsys.readouterr().out.splitlines()
  assert f"{out} is out of date (evaluated with another policy)" in line
  assert "damaged" not in line and line.endswith("recomputing")


def test_a_damaged_cold_start_is_set_aside_and_redone(tmp_path, capsys):
  from _model_helpers import save_hf_decoder
  from ragjax.recipes.cached_phase import stored_meta
  from ragjax.models.hf_io import check_decoder_dir
  cache = str(tmp_path / "cold_start_policy")
  meta = os.path.join(cache, "ragjax_cold_start.json")
  save_hf_decoder("qwen2_tied", cache)
  write(meta, json.dumps({"fingerprint": {"seed": 0}}).encode())
  reusable = lambda fp: stored_meta(cache, fp, intact=check_decoder_dir)   # noqa: E731
  assert reusable({"seed": 0}) == {"fingerprint": {"seed": 0}}
  assert reusable({"seed": 1}) is None                                   # another config
  write(meta, b'{"fingerprint": {"se')                                    # a cut record
  assert reusable({"seed": 0}) is None
  assert os.path.exists(meta + ".damaged") and os.path.isdir(cache)
  write(meta, json.dumps({"fingerprint": {"seed": 0}}).encode())
  weights = os.path.join(cache, "model.safetensors")                     # a cut policy
  with open(weights, "r+b") as f:
    f.truncate(os.path.getsize(weights) // 2)
  assert reusable({"seed": 0}) is None
  assert not os.path.exists(cache) and os.path.isdir(cache + ".damaged")
  out = capsys.readouterr().out
  assert out.count("set aside as") == 2 and "Traceback" not in out


def test_a_damaged_index_of_the_run_is_rebuilt(tmp_path, capsys):
  """The index a run builds from its corpus under the workdir, cut short, is set aside and
  built again; an index the user named (`retriever.index`) is still refused, naming it."""
  from ml_collections import ConfigDict
  corpus = tmp_path / "corpus.jsonl"
  words = ("apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel")
  corpus.write_text("".join(json.dumps({"id": str(i), "contents": f"T{i}\n{w} grows here"})
                            + "\n" for i, w in enumerate(words)))
  c = ConfigDict(dict(retriever=dict(url="", index="", corpus="", backend="bm25",
                                     encoder_dir="", cache_size=0, timeout=1.0, deadline=1.0,
                                     noise=dict(kind="")), progress=False))
  work = str(tmp_path / "w")
  parts.open_retriever(c, work, str(corpus))
  with open(os.path.join(work, "index", "index.json"), "w") as f:
    f.write('{"backe')
  ret = parts.open_retriever(c, work, str(corpus))
  assert ret.search(["damson"], 1)[0][0].id == "3"
  assert os.path.isdir(os.path.join(work, "index.damaged"))
  assert capsys.readouterr().out.count("set aside as") == 1
  c.retriever.index = os.path.join(work, "index.damaged")
  with pytest.raises(ValueError, match="index.damaged"):
    parts.open_retriever(c, work, str(corpus))
