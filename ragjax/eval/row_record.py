"""One row of the comparison table as one file, carried to another machine or session.

    write_row(path, header, preds)           # `python -m ragjax.compare` writes D/rows/<key>.jsonl
    records = read_rows(["results/smollm2_compare"])   # {key: RowRecord}; bad file: ValueError
    why = run_mismatch(record, fingerprint)  # None: measured from a run of this same config
    why = evaluation_mismatch(record, key, limit)   # None: the same questions and settings

A comparison row is a policy evaluated on a suite; what its table needs are the per-question
scores.  A row record keeps exactly that and what it was measured under: line 1 is the header
(`FORMAT`, the row's key and name, the config it came from, the run's config fingerprint and
wall time, the evaluation key: the policy's content digest and every dataset's file digest and
settings; `--limit`; when and on what machine), then one line per question (dataset, index, id,
the answer, its scores, searches, seconds).  A run on a GPU box, or a CPU row that takes a whole
session, is measured once; `python -m ragjax.compare --rows_from DIR` puts its row in a later
table instead of training and evaluating it again, when the record was made by a run of the same
config (its fingerprint, field by field) on the same question files (their SHA-256) under the
same protocol and decoding, with the same `--limit`.  Paths in a fingerprint or a settings block
are compared by file name: the same file lives elsewhere on another machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from typing import Iterable, Mapping, Optional, Sequence

FORMAT = "ragjax.compare.row/1"
QUESTION_FIELDS = ("dataset", "index", "id", "answer", "scores", "searches", "seconds")


@dataclasses.dataclass
class RowRecord:
  path: str
  header: dict
  preds: dict            # dataset key -> [{index, id, answer, scores, searches, seconds}]

  @property
  def key(self) -> str:
    return self.header["key"]

  def describe(self) -> str:
    h = self.header
    return f"{self.path} (measured {h.get('written', '?')} on {h.get('machine', {}).get('device', '?')})"


def machine() -> dict:
  """Where a row was measured: host, platform, CPUs, and the JAX device when JAX is loaded."""
  out = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
         "device": "cpu"}
  import sys
  if "jax" in sys.modules:
    try:
      d = sys.modules["jax"].devices()[0]
      out["device"] = f"{d.platform}: {getattr(d, 'device_kind', d.platform)}"
    except Exception:            # no backend started: the CPU description stands
      pass
  return out


def question_lines(preds: Mapping[str, Sequence[dict]]) -> list[dict]:
  return [{"dataset": key, "index": int(p["index"]), "id": str(p["id"]),
           "answer": p.get("answer"), "scores": p["scores"], "searches": p["searches"],
           "seconds": p.get("seconds", 0.0)}
          for key in sorted(preds) for p in sorted(preds[key], key=lambda p: p["index"])]


def row_text(header: dict, preds: Mapping[str, Sequence[dict]]) -> str:
  lines = [json.dumps({"format": FORMAT, **header}, ensure_ascii=False, sort_keys=True)]
  lines += [json.dumps(q, ensure_ascii=False, sort_keys=True) for q in question_lines(preds)]
  return "\n".join(lines) + "\n"


def write_row(path: str, header: dict, preds: Mapping[str, Sequence[dict]]) -> bool:
  """Writes the record atomically; leaves an identical one untouched (its time included) and
  says whether it wrote.  `header["written"]` and `["machine"]` are kept from the file on disk
  when the rest of it is the same."""
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      text = f.read()
    try:
      first = json.loads(text.partition("\n")[0])
    except json.JSONDecodeError:
      first = None
    if isinstance(first, dict):
      keep = {k: first[k] for k in ("written", "machine") if k in first}
      if row_text({**header, **keep}, preds) == text:
        return False
  header = {"written": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), **header}
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(row_text(header, preds))
  os.replace(tmp, path)
  return True


def read_row(path: str) -> RowRecord:
  """The record in `path`; anything else is a ValueError naming the file and line."""
  try:
    with open(path, encoding="utf-8") as f:
      lines = f.read().splitlines()
  except UnicodeDecodeError:
    raise ValueError(f"{path}: not UTF-8 text (not a row record)") from None
  if not lines:
    raise ValueError(f"{path}: empty (not a row record)")
  try:
    header = json.loads(lines[0])
  except json.JSONDecodeError:
    raise ValueError(f"{path} line 1: not JSON (not a row record)") from None
  if not isinstance(header, dict) or header.get("format") != FORMAT:
    raise ValueError(f"{path} line 1: not a row record (format is not {FORMAT!r})")
  for field in ("key", "name", "evaluation", "limit"):
    if field not in header:
      raise ValueError(f"{path} line 1: the header has no {field!r}")
  header = {k: v for k, v in header.items() if k != "format"}
  preds: dict = {}
  for n, raw in enumerate(lines[1:], 2):
    if not raw.strip():
      continue
    try:
      q = json.loads(raw)
    except json.JSONDecodeError:
      raise ValueError(f"{path} line {n}: not JSON") from None
    missing = [f for f in QUESTION_FIELDS if not isinstance(q, dict) or f not in q]
    if missing:
      raise ValueError(f"{path} line {n}: a question line without {', '.join(missing)}")
    if not isinstance(q["scores"], dict) or not all(
        isinstance(q["scores"].get(m), (int, float)) for m in ("em", "f1")):
      raise ValueError(f"{path} line {n}: scores must hold numbers 'em' and 'f1'")
    preds.setdefault(q["dataset"], []).append(
        {k: q[k] for k in QUESTION_FIELDS if k != "dataset"})
  for key, got in preds.items():
    indices = [p["index"] for p in got]
    if len(set(indices)) != len(indices):
      raise ValueError(f"{path}: dataset {key!r} holds one question index twice")
    got.sort(key=lambda p: p["index"])
  return RowRecord(path, header, preds)


def read_rows(dirs: Iterable[str]) -> dict[str, RowRecord]:
  """{row key: record} from every `*.jsonl` in the directories (or files); a key found twice is
  an error naming both files."""
  out: dict[str, RowRecord] = {}
  for d in dirs:
    if os.path.isfile(d):
      paths = [d]
    elif os.path.isdir(d):
      paths = sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".jsonl"))
    else:
      raise FileNotFoundError(f"--rows_from {d}: no such file or directory")
    for p in paths:
      rec = read_row(p)
      if rec.key in out:
        raise ValueError(f"--rows_from: row {rec.key!r} is in both {out[rec.key].path} and {p}")
      out[rec.key] = rec
  return out


def portable(value):
  """A fingerprint or settings value with every absolute path cut to its file name."""
  if isinstance(value, str) and value.startswith("/"):
    return os.path.basename(value.rstrip("/"))
  if isinstance(value, dict):
    return {k: portable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [portable(v) for v in value]
  return value


def differing(a: Mapping, b: Mapping, limit: int = 3) -> list[str]:
  """The keys whose (portable) values differ, the first `limit` of them."""
  a, b = portable(dict(a)), portable(dict(b))
  keys = sorted(k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>"))
  return keys[:limit] + ([f"... {len(keys) - limit} more"] if len(keys) > limit else [])


def run_mismatch(record: RowRecord, fingerprint: Mapping) -> Optional[str]:
  """None when the record's run had this config fingerprint; else what differs."""
  run = record.header.get("run") or {}
  if not run.get("fingerprint"):
    return f"{record.path} holds no run"
  diff = differing(run["fingerprint"], fingerprint)
  return f"{record.path} was measured under another config ({', '.join(diff)})" if diff else None


def evaluation_mismatch(record: RowRecord, key: Mapping, limit: int) -> Optional[str]:
  """None when the record was evaluated on the same question files (SHA-256 and size), under
  the same settings and `--limit`, and (where `key` has one: the policy is on this machine) by
  the same policy; else what differs."""
  stored = record.header["evaluation"]
  if record.header.get("limit") != limit:
    return f"{record.path} was evaluated with --limit {record.header.get('limit')}, not {limit}"
  if key.get("policy") and stored.get("policy", {}).get("sha256") != key["policy"]["sha256"]:
    return f"{record.path} was evaluated with another policy (its content digest differs)"
  mine, theirs = key["datasets"], stored.get("datasets", {})
  if set(mine) != set(theirs):
    return f"{record.path} holds datasets {sorted(theirs)}, not {sorted(mine)}"
  for name in mine:
    a, b = dict(mine[name]), dict(theirs[name])
    fa, fb = a.pop("file", None), b.pop("file", None)
    if (fa is None) != (fb is None) or (fa and (fa["sha256"], fa["bytes"]) !=
                                       (fb["sha256"], fb["bytes"])):
      return f"{record.path}: dataset {name} was another question file"
    diff = differing(a, b)
    if diff:
      return f"{record.path}: dataset {name} was evaluated under other settings ({', '.join(diff)})"
  for name, size in (record.header.get("sizes") or {}).items():
    if len(record.preds.get(name, [])) != size:
      return (f"{record.path}: dataset {name} has {len(record.preds.get(name, []))} questions, "
              f"its header says {size}")
  return None
