"""Trajectory dump (JSONL) and the HTML / terminal viewer (`python -m ragjax.rollout.viewer`)."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.rollout.dump import DumpError, dump_batch, read_jsonl  # noqa: E402
from ragjax.rollout.engine import RolloutEngine  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.viewer import page_html, terminal_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_batch():
  tok = h.tokenizer()
  proto = get_protocol("search_r1")
  scripts = {0: ["<think> a & b </think> <search> Tessaly River </search>",
                 "<answer> Quillport </answer>"],
             1: ["<answer> Paris </answer>"]}
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  return RolloutEngine(proto, pol, h.bm25_retriever(), tok).run(["Where?"], 2), tok


@pytest.fixture()
def dumped(tmp_path):
  batch, tok = small_batch()
  path = str(tmp_path / "roll.jsonl")
  assert dump_batch(path, batch, tok, rewards=[1.0, 0.0],
                    trained=loss_mask(batch.traj.labels)) == 2
  return path, batch


def test_dump_round_trips_tokens_labels_and_metadata(dumped):
  path, batch = dumped
  recs = read_jsonl(path)
  t = batch.traj
  for i, rec in enumerate(recs):
    k = int(t.lengths[i])
    ids = [x for s in rec["spans"] for x in s["ids"]]
    labels = [Source[s["label"]] for s in rec["spans"] for _ in s["ids"]]
    assert ids == t.tokens[i, :k].tolist()
    assert labels == t.labels[i, :k].tolist()
    assert sum(s["trained"] for s in rec["spans"]) == int(loss_mask(t.labels)[i].sum())
  assert [r["reward"] for r in recs] == [1.0, 0.0]
  assert recs[0]["turns"][0]["query"] == "Tessaly River"
  assert recs[0]["turns"][0]["doc_ids"] == ["p4"]
  assert [r["answer"] for r in recs] == ["Quillport", "Paris"]
  pol = [s for s in recs[0]["spans"] if s["label"] == "POLICY"]
  pos = np.nonzero(t.labels[0] == Source.POLICY)[0]
  assert sum(s["logprob_sum"] for s in pol) == pytest.approx(float(t.sampler_logprobs[0, pos].sum()))


def test_html_and_terminal_rendering(dumped):
  path, _ = dumped
  recs = read_jsonl(path)
  page = page_html(recs)
  assert "&lt;search&gt; Tessaly River &lt;/search&gt;" in page      # escaped policy text
  assert "a &amp; b" in page
  assert 'Doc 1(Title: &quot;Tessaly River&quot;)' in page
  assert page.count('class="traj"') == 2 and 'id="row-1"' in page
  assert "#dde9ff" in page and "reward</b> 1.0" in page
  plain = terminal_text(recs, color=False)
  assert "[RETRIEVED]Doc 1(Title: \"Tessaly River\")" in plain
  assert "[POLICY]<answer> Quillport </answer>[/POLICY]" in plain
  assert "[PROMPT]" not in plain and "[PROMPT]" in terminal_text(recs, True, color=False)
  assert "\x1b[36m" in terminal_text(recs)


def test_view_cli_writes_html_and_prints(dumped, tmp_path):
  path, _ = dumped
  env = dict(os.environ, PYTHONPATH=ROOT)
  r = subprocess.run([sys.executable, "-m", "ragjax.rollout.viewer", path], capture_output=True,
                     text=True, env=env, cwd=ROOT, timeout=120)
  assert r.returncode == 0, r.stderr
  out = r.stdout.strip()
  assert out == path[:-len(".jsonl")] + ".html"
  assert "&lt;answer&gt; Quillport &lt;/answer&gt;" in open(out, encoding="utf-8").read()
  r = subprocess.run([sys.executable, "-m", "ragjax.rollout.viewer", path, "--terminal",
                      "--no-color", "--rows", "1"], capture_output=True, text=True, env=env,
                     cwd=ROOT, timeout=120)
  assert r.returncode == 0 and "=== row 1" in r.stdout and "=== row 0" not in r.stdout


def test_bad_dumps_name_file_line_and_field(tmp_path):
  p = tmp_path / "bad.jsonl"
  p.write_text('{"row": 0, "group_id": 0, "stop_reason": "x", "spans": [], "turns": []}\nnot json\n')
  with pytest.raises(DumpError, match=r"bad.jsonl:2: not JSON"):
    read_jsonl(str(p))
  p.write_text('{"row": 0, "group_id": 0, "spans": [], "turns": []}\n')
  with pytest.raises(DumpError, match=r"bad.jsonl:1: .*'stop_reason'"):
    read_jsonl(str(p))
  p.write_text(json.dumps({"row": 0, "group_id": 0, "stop_reason": "x", "turns": [],
                           "spans": [{"label": "WAT", "text": ""}]}) + "\n")
  with pytest.raises(DumpError, match="unknown label 'WAT'"):
    read_jsonl(str(p))
  r = subprocess.run([sys.executable, "-m", "ragjax.rollout.viewer", str(tmp_path / "none.jsonl")],
                     capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                     cwd=ROOT, timeout=120)
  assert r.returncode == 2 and "no such trajectory dump" in r.stderr


def _hostile_dump(tmp_path):
  """A dump whose every field carries markup or terminal control sequences."""
  rec = {"row": "<script>alert(1)</script>", "group_id": "<img src=x onerror=alert(2)>",
         "clone_of": "<b>c</b>", "stop_reason": "<script>s</script>",
         "answer": '"><script>a</script>\x1b]0;pwned\x07', "reward": "<i>r</i>",
         "num_tokens": "<script>n</script>",
         "spans": [{"label": "POLICY", "turn": "<script>t</script>", "trained": 1,
                    "text": "<script>x</script>\x1b[31mred\x1b[2J\u202egnp.exe\r",
                    "logprob_sum": "<script>l</script>"}],
         "turns": [{"turn": "<script>u</script>", "action": "search",
                    "query": "<script>q</script>\x1b[2J", "reason": "<script>r</script>",
                    "doc_ids": ["<script>d</script>", "\x1b[2J"]}]}
  path = tmp_path / "hostile.jsonl"
  path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
  return str(path)


def test_viewer_escapes_every_dump_field(tmp_path):
  path = _hostile_dump(tmp_path)
  page = page_html(read_jsonl(path))
  for raw in ("<script", "<img", "<b>c</b>", "<i>r</i>", '"><script'):
    assert raw not in page, raw
  assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and 'id="row-&lt;script&gt;' in page
  assert "&lt;img src=x onerror=alert(2)&gt;" in page and "&lt;script&gt;d&lt;/script&gt;" in page
  for color in (False, True):
    text = terminal_text(read_jsonl(path), show_prompt=True, color=color)
    painted = re.sub(r"\x1b\[\d+m", "", text) if color else text     # the viewer's own colours
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202e]", painted), repr(painted)
    assert "\\x1b[31mred\\x1b[2J\\u202egnp.exe\\x0d" in text and "\\x1b[2J" in text
  env = dict(os.environ, PYTHONPATH=ROOT)
  r = subprocess.run([sys.executable, "-m", "ragjax.rollout.viewer", path, "--terminal"],
                     capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
  assert r.returncode == 0, r.stderr
  assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202e]", re.sub(r"\x1b\[\d+m", "", r.stdout))


def test_a_dump_of_odd_shapes_is_refused_or_shown_never_a_traceback(tmp_path):
  """Issue 56 item 8 and its hunt: `spans` an int or null, a turn that is an int, a `row`
  that is a list (asked for with --rows), `doc_ids` a number.  Malformed shapes are one
  `DumpError` naming the file, line and field; odd values are shown as text."""
  from ragjax.rollout.viewer import select
  good = {"row": 0, "group_id": 0, "stop_reason": "x", "turns": [], "spans": []}
  p = tmp_path / "odd.jsonl"
  for bad, match in (({"spans": 3}, "'spans' must be a list, got int"),
                     ({"spans": None}, "'spans' must be a list, got NoneType"),
                     ({"turns": [1]}, "turn 0 must be an object, got int")):
    p.write_text(json.dumps({**good, **bad}) + "\n")
    with pytest.raises(DumpError, match=rf"odd.jsonl:1: {re.escape(match)}"):
      read_jsonl(str(p))
  p.write_text(json.dumps({**good, "row": [1], "turns": [{"turn": 0, "doc_ids": 5}]}) + "\n")
  recs = read_jsonl(str(p))
  assert "<td>5</td>" in page_html(recs) and "row [1]" in terminal_text(recs, color=False)
  with pytest.raises(KeyError, match=r"rows \[0\] are not in the dump"):
    select(recs, [0])
