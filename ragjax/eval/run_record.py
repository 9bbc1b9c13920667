"""`<out>/run.json`: what decides an evaluation's predictions, written by the first run and
checked by every resume before a model or an index is loaded.

    record = run_record(c, suite, checkpoint=..., retrieval=..., judge=..., datasets=...)
    stored = check_run_file(out_dir, record)      # ValueError naming the fields that differ

It holds:
* `checkpoint`: the path and a content fingerprint (`ragjax.eval.fingerprint`);
* `retrieval`: the index directory and its fingerprint, or the server URL and what its
  `/health` reports (a server's index is known by that report only);
* `judge` (suites with `acc`): the `eval.judge` model;
* `settings`: the suite's pinned protocol, sampler and decoding; `config`: the config's
  protocol / sampler / rollout / retriever sections, `eval.top_k`, and `eval.batch_size` when
  the suite samples;
* `datasets`: per dataset run so far, its file (path, bytes, SHA-256), reader format, filter,
  metric, resolved protocol and decoding (`ragjax.eval.harness.dataset_settings`).

A resume must match everything but `datasets` exactly (but for the sampler's speed settings,
`SPEED_ONLY`: the same arithmetic, rounded alike or nearly), and every dataset it shares with the
stored run; datasets it adds (`--datasets`, a file that appeared) are added to the record.
"""

from __future__ import annotations

import json
import os

RUN_FILE = "run.json"
VERSION = 2
# Settings that change how fast, not what, an evaluation computes (a run.json written before
# one existed, or with another value, still resumes)
SPEED_ONLY = ("config.sampler.cpu_attention_kernel", "config.sampler.shared_prefix")


def _plain(x):
  if hasattr(x, "to_dict"):
    x = x.to_dict()
  return json.loads(json.dumps(x, default=str))


def run_record(c, suite, *, checkpoint: dict, retrieval: dict, judge: dict,
               datasets: dict) -> dict:
  config = {k: _plain(c[k]) for k in ("protocol", "sampler", "rollout", "retriever")}
  config["eval"] = {"top_k": int(c.eval.get("top_k", 0) or 0)}
  if not suite.greedy:
    config["eval"]["batch_size"] = int(c.eval.batch_size)
  return {"version": VERSION, "suite": suite.name, "checkpoint": checkpoint,
          "retrieval": retrieval, "judge": judge, "settings": _plain(suite.settings()),
          "config": config, "datasets": _plain(datasets)}


def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
  from ragjax.typed_config import flatten
  fa, fb = flatten(a, prefix), flatten(b, prefix)
  return [f"{k}: stored={fa.get(k)!r} now={fb.get(k)!r}" for k in sorted(set(fa) | set(fb))
          if fa.get(k) != fb.get(k) and k not in SPEED_ONLY]


def check_run_file(out_dir: str, record: dict) -> dict:
  """Writes run.json, or checks a resumed run against it (see the module docstring) and adds
  the datasets new to it; returns the record now on disk."""
  path = os.path.join(out_dir, RUN_FILE)
  if os.path.exists(path):
    try:
      with open(path, encoding="utf-8") as f:
        old = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
      raise ValueError(f"{path} is not JSON; use a new --out directory") from None
    if not isinstance(old, dict) or old.get("version") != VERSION:
      raise ValueError(f"{path} was written by an older ragjax (without content fingerprints "
                       "of the checkpoint, index and data); use a new --out directory")
    head = lambda r: {k: v for k, v in r.items() if k != "datasets"}
    diff = _diff(head(old), head(record))
    if not diff:
      for key in sorted(set(old["datasets"]) & set(record["datasets"])):
        diff += _diff(old["datasets"][key], record["datasets"][key], f"datasets.{key}")
    if diff:
      raise ValueError(f"{out_dir} holds predictions of a different run ({'; '.join(diff[:6])}"
                       f"{' ...' if len(diff) > 6 else ''}); use a new --out directory")
    merged = dict(old, datasets={**record["datasets"], **old["datasets"]})
  else:
    merged = record
  os.makedirs(out_dir, exist_ok=True)
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(merged, f, indent=1, ensure_ascii=False)
  os.replace(path + ".tmp", path)
  return merged


def judge_record(c, suite) -> dict:
  """run.json's `judge`: the `eval.judge` model of a suite that asks for `acc`."""
  if not suite.judge_template:
    return {}
  j = c.eval.judge
  return {"template": suite.judge_template, "url": j.url, "model": j.model,
          "checkpoint": os.path.abspath(j.checkpoint) if j.checkpoint else ""}


def retrieval_record(c, retriever=None) -> dict:
  """run.json's `retrieval`: the index directory (`retriever.index`) and its content
  fingerprint, or the server URL (`retriever.url`) and what `retriever.health()` reports."""
  from ragjax.eval.fingerprint import index_fingerprint
  if c.retriever.url:
    health = retriever.health() if hasattr(retriever, "health") else {}
    return {"url": c.retriever.url,
            "server": {k: v for k, v in health.items() if k not in ("status", "limits")}}
  index = os.path.abspath(c.retriever.index)
  return {"index": index, **index_fingerprint(index)}


# --- the record in words, for the table's header -----------------------------------------------
def describe_retrieval(record: dict) -> str:
  """What the policy read: the server (summarised when its /health names a summariser, as
  UR²'s proxy does) or the index's raw passages."""
  if "url" in record:
    server = record.get("server") or {}
    what = (f"passages summarised by {server['summariser']} (mode {server.get('mode')})"
            if server.get("summariser") else "passages as the server returns them")
    return f"server {record['url']}: {what}"
  meta_path = os.path.join(record["index"], "index.json")
  kind = "index"
  try:
    with open(meta_path, encoding="utf-8") as f:
      meta = json.load(f)
    kind = f"{meta.get('backend')}, {meta.get('n')} passages"
  except (OSError, ValueError):
    pass
  return (f"index {record['index']} ({kind}; content {short_digest(record)}): raw passages, "
          "not summarised")


def short_digest(fingerprint: dict) -> str:
  sampled = any(f.get("hashed", "all") != "all" for f in fingerprint.get("files", {}).values())
  return f"sha256 {fingerprint['sha256'][:12]}{', large files sampled' if sampled else ''}"


def settings_lines(datasets: dict) -> dict:
  """{"protocol": ..., "decoding": ...}: the settings the datasets ran with (run.json's
  `datasets` entries), fields that differ between datasets listed per dataset."""
  out = {}
  for part in ("protocol", "decoding"):
    per = {k: d[part] for k, d in datasets.items() if part in d}
    if not per:
      continue
    fields = sorted({f for v in per.values() for f in v})
    first = next(iter(per.values()))
    common = {f: first.get(f) for f in fields
              if len({json.dumps(v.get(f), sort_keys=True) for v in per.values()}) == 1}
    text = json.dumps(common)
    differ = [f for f in fields if f not in common]
    if differ:
      text += "; per dataset: " + json.dumps({k: {f: v.get(f) for f in differ}
                                              for k, v in per.items()})
    out[part] = text
  return out
