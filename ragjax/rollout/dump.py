"""Trajectory dumps: one JSON line per row, self-contained for the viewer.

Each row lists its spans (maximal runs of one label in one turn) with decoded text and the exact
token ids, its turns (action, query, retrieved doc ids), answer, stop reason and reward, so a
researcher can see what the policy saw and what was trained on without the tokenizer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

import numpy as np

from ragjax.rollout.labels import Source
from ragjax.rollout.textspan import decode
if TYPE_CHECKING:                      # keeps the viewer CLI free of jax imports
  from ragjax.rollout.trajectory import RolloutBatch

REQUIRED = ("row", "group_id", "stop_reason", "spans", "turns")


class DumpError(ValueError):
  """A malformed dump line; the message names the file, line and field."""


def spans_of(tokens, labels, turns, mask, logprobs, tokenizer) -> list[dict]:
  out, n, j = [], len(tokens), 0
  while j < n:
    e = j
    while e < n and labels[e] == labels[j] and turns[e] == turns[j]:
      e += 1
    ids = [int(x) for x in tokens[j:e]]
    span = {"label": Source(int(labels[j])).name, "turn": int(turns[j]), "text": decode(tokenizer, ids),
            "ids": ids, "trained": int(np.sum(mask[j:e]))}
    if labels[j] == Source.POLICY:
      span["logprob_sum"] = float(np.sum(logprobs[j:e]))
    out.append(span)
    j = e
  return out


def batch_records(batch: "RolloutBatch", tokenizer, rewards: Optional[Sequence[float]] = None,
                  extra: Optional[Sequence[dict]] = None, *, trained) -> list[dict]:
  """One record per row; a span's `trained` counts its tokens that `trained` ([R, T], the
  caller's loss mask, `ragjax.rl.masks.loss_mask`) marks."""
  t = batch.traj
  mask = np.asarray(trained)
  recs = []
  for i, m in enumerate(batch.meta.rows):
    k = int(t.lengths[i])
    arrays = [np.asarray(getattr(t, f))[i, :k] for f in ("tokens", "labels", "turn")]
    arrays += [mask[i, :k], np.asarray(t.sampler_logprobs)[i, :k]]
    rec = {"row": i, "group_id": int(m.group_id), "prompt_index": m.prompt_index,
           "sample_index": m.sample_index, "clone_of": m.clone_of, "protocol": batch.meta.protocol,
           "stop_reason": m.stop_reason, "answer": m.answer,
           "reward": None if rewards is None else float(rewards[i]),
           "num_tokens": k, "prompt_tokens": int(t.prompt_lengths[i]),
           "spans": spans_of(*arrays, tokenizer=tokenizer),
           "turns": [{"turn": r.turn, "action": r.action, "query": r.query,
                      "all_queries": list(r.all_queries), "doc_ids": list(r.doc_ids),
                      "obs_truncated": r.obs_truncated, "reason": r.reason} for r in m.turns]}
    if extra is not None:
      rec.update(extra[i])
    recs.append(rec)
  return recs


def write_jsonl(path: str, records: Iterable[dict], append: bool = False) -> int:
  n = 0
  with open(path, "a" if append else "w", encoding="utf-8") as f:
    for rec in records:
      f.write(json.dumps(rec, ensure_ascii=False) + "\n")
      n += 1
  return n


def dump_batch(path: str, batch: "RolloutBatch", tokenizer, rewards=None, extra=None,
               append: bool = False, *, trained) -> int:
  """Writes one line per trajectory row; returns the number written."""
  return write_jsonl(path, batch_records(batch, tokenizer, rewards, extra, trained=trained),
                     append)


def _lines(f, path: str):
  """(line number, line) of a text file; bytes that are not UTF-8 are a `DumpError`."""
  line_no = 0
  try:
    for line_no, line in enumerate(f, 1):
      yield line_no, line
  except UnicodeDecodeError as e:
    raise DumpError(f"{path}: not a UTF-8 text file (byte {e.object[e.start]:#04x} after "
                    f"line {line_no}); is it a trajectory dump?") from None


def read_jsonl(path: str) -> list[dict]:
  recs = []
  try:
    f = open(path, encoding="utf-8")
  except FileNotFoundError:
    raise DumpError(f"{path}: no such trajectory dump") from None
  with f:
    for line_no, line in _lines(f, path):
      if not line.strip():
        continue
      try:
        rec = json.loads(line)
      except json.JSONDecodeError as e:
        raise DumpError(f"{path}:{line_no}: not JSON ({e.msg} at column {e.colno})") from None
      if not isinstance(rec, dict):
        raise DumpError(f"{path}:{line_no}: expected a JSON object, got {type(rec).__name__}")
      for key in REQUIRED:
        if key not in rec:
          raise DumpError(f"{path}:{line_no}: trajectory record has no '{key}' field")
      for key in ("spans", "turns"):
        if not isinstance(rec[key], list):
          raise DumpError(f"{path}:{line_no}: '{key}' must be a list, got "
                          f"{type(rec[key]).__name__}")
      for t_no, turn in enumerate(rec["turns"]):
        if not isinstance(turn, dict):
          raise DumpError(f"{path}:{line_no}: turn {t_no} must be an object, got "
                          f"{type(turn).__name__}")
      for s_no, span in enumerate(rec["spans"]):
        if not isinstance(span, dict) or "label" not in span or "text" not in span:
          raise DumpError(f"{path}:{line_no}: span {s_no} needs 'label' and 'text'")
        if span["label"] not in Source.__members__:
          raise DumpError(f"{path}:{line_no}: span {s_no} has unknown label {span['label']!r}")
      recs.append(rec)
  return recs
