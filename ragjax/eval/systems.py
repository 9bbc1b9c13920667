"""Evaluation systems: one policy + retriever + protocol (an engine) over a list of examples.

    r = evaluate_system("policy + retrieval", engine, records, "test", batch_size=100)
    table, rows = results_table([r, ...], qtypes=("1hop", "2hop"))

Greedy rollouts in fixed-size chunks (one compiled shape), EM of each row's parsed answer
(`RowMeta.answer`, the protocol's parse) against the record's gold answers, grouped by the
record's question type (`metadata.qtype`; "other" when absent).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from ragjax.metrics import answer_metrics
from ragjax.rl.signatures import pairs


@dataclasses.dataclass
class SystemResult:
  name: str
  split: str
  em: list[float]
  qtypes: list[str]
  searches: list[int]
  batch: list          # RolloutBatch per chunk (for the viewer)
  responses: list[str]
  # signature name -> (num, den) per question (ragjax.rl.signatures; `rl.signatures`)
  signatures: dict = dataclasses.field(default_factory=dict)
  f1: list = dataclasses.field(default_factory=list)   # per question, when scored


def qtype_of(record) -> str:
  return (record.get("metadata") or {}).get("qtype", "other")


def with_documents(records: Sequence[dict], retriever, protocol, tokenizer) -> list[dict]:
  """The records, each with a `documents` field for the retrieve-once protocol: the question
  itself as the query (one batched `retriever.search`), its `protocol.top_k` passages as the
  protocol formats an observation's, cut to `protocol.obs_max_tokens` tokens of `tokenizer`."""
  hits = retriever.search([r["question"] for r in records], protocol.top_k)
  if len(hits) != len(records):
    raise ValueError(f"retriever returned {len(hits)} result lists for {len(records)} questions")
  out = []
  for rec, found in zip(records, hits):
    docs = protocol.truncate_chars(protocol.format_documents(list(found)[:protocol.top_k]).strip())
    if protocol.obs_max_tokens is not None:
      ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
      if len(ids) > protocol.obs_max_tokens:
        docs = tokenizer.decode(ids[:protocol.obs_max_tokens])
    out.append(dict(rec, documents=docs))
  return out


def _chunks(records: Sequence[dict], size: int):
  """Chunks of `size` records, the last padded with copies of the first (one batch shape)."""
  for s in range(0, len(records), size):
    chunk = list(records[s:s + size])
    yield s, chunk, chunk + [chunk[0]] * (size - len(chunk))


def evaluate_system(name: str, engine, records: Sequence[dict], split: str, *,
                    batch_size: int, seed: int = 0, score=None,
                    signatures: Sequence[str] = ()) -> SystemResult:
  """Greedy rollouts of every record (the engine decides greedy / sampled); `score(answer,
  record)` replaces EM (e.g. UR²'s metric per task, `ragjax.metrics.by_task`); `signatures`:
  the registered signature metrics to compute per question."""
  em, qtypes, searches, batches, responses, rows = [], [], [], [], [], []
  for _, chunk, padded in _chunks(records, batch_size):
    batch = engine.run(padded, samples_per_prompt=1, seed=seed)
    batches.append(batch)
    for rec, row in zip(chunk, batch.rows):
      em.append(answer_metrics(row.answer, rec["golden_answers"])["em"] if score is None
                else score(row.answer, rec))
      qtypes.append(qtype_of(rec))
      searches.append(row.num_searches)
      responses.append(row.response_text)
      rows.append(row)
  sigs = {s: tuple(a.tolist() for a in pairs(s, rows, records)) for s in signatures}
  return SystemResult(name, split, em, qtypes, searches, batches, responses, sigs)


def sample_system(name: str, engine, records: Sequence[dict], split: str, *, samples: int,
                  temperature: float, batch_size: int, seed: int = 1
                  ) -> tuple[SystemResult, SystemResult]:
  """`samples` sampled rollouts per record from a sampling engine: (pass@1, pass@k) results.

  pass@1 is each question's success rate, pass@k whether any sample succeeded.  Their gap
  over greedy EM is what RL can still sharpen (reward-weighted updates move probability
  toward answers the policy already samples)."""
  per_chunk = max(1, batch_size // samples)
  wins = np.zeros((len(records), samples))
  searches, batches = [], []
  for s, chunk, padded in _chunks(records, per_chunk):
    batch = engine.run(padded, samples_per_prompt=samples, seed=seed + s)
    batches.append(batch)
    for row in batch.rows[:len(chunk) * samples]:
      q, j = row.prompt_index, row.sample_index
      wins[s + q, j] = answer_metrics(row.answer, chunk[q]["golden_answers"])["em"]
      searches.append(row.num_searches)
  qtypes = [qtype_of(r) for r in records]
  tag = f"T={temperature:g}, {samples} samples"
  return (SystemResult(f"{name}, pass@1 ({tag})", split, list(wins.mean(1)), qtypes, searches,
                       batches, []),
          SystemResult(f"{name}, pass@{samples} ({tag})", split, list(wins.max(1)), qtypes,
                       searches, batches, []))


def results_table(results: Sequence[SystemResult], qtypes: Optional[Sequence[str]] = None,
                  groups: Optional[Mapping[str, Sequence[str]]] = None, metric: str = "EM"
                  ) -> tuple[str, list[dict]]:
  """Markdown table (EM, or the `metric` the results hold, with a 95% bootstrap interval per
  question type; F1 over all questions beside it when every result carries F1) and its rows; the types default to those present, in order of appearance.
  `groups` adds columns over several types (e.g. the world's entity questions apart from its
  yes/no comparisons)."""
  from ragjax.report.bootstrap import bootstrap_mean
  from ragjax.report.table import em_by_type, markdown_table
  if qtypes is None:
    qtypes = list(dict.fromkeys(q for r in results for q in r.qtypes))
  groups = dict(groups or {})
  with_f1 = bool(results) and all(r.f1 for r in results)
  rows = []
  for r in results:
    est = em_by_type(r.em, r.qtypes, qtypes)
    for name, members in groups.items():
      est[name] = bootstrap_mean([e for e, q in zip(r.em, r.qtypes) if q in members])
    if with_f1:
      est["f1"] = bootstrap_mean(r.f1)
    rows.append({"split": r.split, "system": r.name, **est,
                 "searches": float(np.mean(r.searches)) if r.searches else float("nan")})
  extra = [("F1 all", "f1")] if with_f1 else []
  return markdown_table(rows, ["all", *groups, *qtypes], metric, extra), rows


def write_viewer(result: SystemResult, records: Sequence[dict], tokenizer, out_path: str,
                 limit: int = 40) -> str:
  """JSONL dump + HTML page of the first `limit` trajectories, with gold answers and EM."""
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.dump import batch_records, write_jsonl
  from ragjax.rollout.viewer import page_html
  recs = [r for batch in result.batch
          for r in batch_records(batch, tokenizer, trained=loss_mask(batch.traj.labels))][:len(records)]
  for rec, ex, em in zip(recs, records, result.em):
    rec.update(question=ex["question"], golden_answers=list(ex["golden_answers"]), reward=em,
               qtype=qtype_of(ex))
  recs = recs[:limit]
  write_jsonl(out_path[:-len(".html")] + ".jsonl", recs)
  with open(out_path, "w", encoding="utf-8") as f:
    f.write(page_html(recs, title=f"{result.name} on {result.split}"))
  return out_path
