"""The paper-layout table of a suite run, from its per-question predictions only.

    summary = summarize(suite, preds, sizes, missing, published=row)
    write_tables(out_dir, summary)     # table.md, table.csv, table.json
    print(summary["markdown"])

Datasets are columns (the suite's order), then the suite's group averages, the macro average
(unweighted mean over the datasets present, as the papers' "Avg") and the sample-weighted
average (all questions pooled), both labelled.  Rows: questions (with the paper's set size
when the file holds fewer), each metric in percent (a column shows only the metrics it
reports, `Suite.metrics_of`: a multiple-choice or math column only its own), searches per
question, the column's own paper metric when the suite mixes metrics, then the published row
for the same method and model size and our difference from it in points.  An average is
given only when every column it covers reports the same metric (no mean of letter EM with
F1).  Missing datasets stay as columns marked
"missing" and are left out of every average; the notes under the table list them, the
slices, and judge replies that could not be parsed.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Optional

import numpy as np

from ragjax.eval.suites import METRIC_TITLES, METRICS, Suite
from ragjax.report.bootstrap import bootstrap_mean

MACRO, WEIGHTED = "Avg (macro)", "Avg (weighted by n)"
INFO_LINES = ("checkpoint", "data_root", "retrieval", "protocol", "decoding", "throughput")


def _mean(xs) -> Optional[float]:
  return float(np.mean(xs)) if len(xs) else None


def summarize(suite: Suite, preds: dict, sizes: dict, missing: dict,
              published: Optional[dict] = None, info: Optional[dict] = None,
              files: Optional[dict] = None, not_run=()) -> dict:
  """Per-dataset means (percent) with a 95% bootstrap interval on the column's own metric,
  group / macro / weighted averages, the published row and our difference from it.
  `files`: {key: the file a column came from: path, bytes, sha256} (run.json's);
  `not_run`: columns `--datasets` left out."""
  cols, scores = {}, {}
  files = files or {}
  for spec in suite.datasets:
    key = spec.key
    if key in missing or key in not_run:
      cols[key] = {"name": spec.name, "status": "missing" if key in missing else "not run",
                   "file": missing.get(key, ""), "paper_n": spec.paper_n, "metric": spec.metric}
      continue
    recs = preds.get(key, [])
    ms = suite.metrics_of(key)
    per = {m: [r["scores"][m] for r in recs if m in r["scores"]] for m in ms}
    scores[key] = per
    est = bootstrap_mean(per[spec.metric]) if per.get(spec.metric) else None
    cols[key] = {
        "name": spec.name, "status": "ok" if len(recs) == sizes.get(key, len(recs)) else "partial",
        "n": len(recs), "expected": sizes.get(key, len(recs)), "paper_n": spec.paper_n,
        "metric": spec.metric, "sample": spec.sample,
        "values": {m: 100 * v for m in ms if (v := _mean(per[m])) is not None},
        "paper_metric": None if est is None else 100 * est.mean,
        "ci95": None if est is None else [100 * est.low, 100 * est.high],
        "searches": _mean([r["searches"] for r in recs]),
        "no_answer": sum(r["answer"] is None for r in recs),
        "source": files.get(key), "where": dict(spec.where)}
  present = [s.key for s in suite.datasets if s.key in scores and cols[s.key]["n"]]

  def average(keys, metric=None) -> dict:
    """macro and weighted mean of `metric` (None: each column's own) over `keys` present;
    None unless every one of them reports that same metric (like with like only)."""
    here = [k for k in keys if k in present]
    wanted = {k: metric or suite.dataset(k).metric for k in here}
    if len(set(wanted.values())) != 1 or any(m not in suite.metrics_of(k)
                                             for k, m in wanted.items()):
      return {"macro": None, "weighted": None, "over": 0}
    vals, pooled = [], []
    for k, m in wanted.items():
      if scores[k].get(m):
        vals.append(100 * float(np.mean(scores[k][m])))
        pooled += scores[k][m]
    return {"macro": _mean(vals), "weighted": None if not pooled else 100 * float(np.mean(pooled)),
            "over": len(vals)}

  avg_cols = [(t, keys) for t, keys in suite.groups] + [(MACRO, suite.keys)]
  averages = {}
  for title, keys in avg_cols:
    averages[title] = {"paper_metric": average(keys),
                       **{m: average(keys, m) for m in suite.all_metrics},
                       "complete": all(k in present for k in keys), "datasets": list(keys),
                       "present": sum(k in present for k in keys)}
  weighted = {"paper_metric": average(suite.keys)["weighted"],
              **{m: average(suite.keys, m)["weighted"] for m in suite.all_metrics}}
  searches_all = [r["searches"] for k in present for r in preds[k]]
  out = {"suite": suite.name, "title": suite.title, "source": suite.source,
         "columns": cols, "averages": averages, "weighted": weighted,
         "searches_weighted": _mean(searches_all), "published": published,
         "info": info or {}}
  out["delta"], out["delta_over"] = _delta(suite, out)
  extra = published_metrics(suite, published) if published else []
  if extra:        # the published row reports more than each column's own metric (R3-RAG)
    out["delta_by_metric"] = {m: _delta(suite, out, m)[0] for m in extra}
  out["markdown"] = render_markdown(suite, out)
  out["csv"] = render_csv(suite, out)
  return out


def _pub_value(published: dict, key: str, metric: str) -> Optional[float]:
  return (published.get("values", {}).get(key) or {}).get(metric)


def published_metrics(suite: Suite, published: dict) -> list:
  """The metrics of a published row that reports more than each column's own (R3-RAG: ACC,
  F1 and EM), the paper metric first; [] when it reports each column's own only."""
  have = {m for k in suite.keys for m in (published.get("values", {}).get(k) or {})}
  own = {d.metric for d in suite.datasets}
  if have <= own:
    return []
  return sorted(have & set(METRICS), key=lambda m: (m not in own, METRICS.index(m)))


def paper_datasets(published: dict, suite: Suite, keys, metric: Optional[str] = None) -> list:
  """The datasets among `keys` the published row reports (its averages are over these)."""
  return [k for k in keys
          if _pub_value(published, k, metric or suite.dataset(k).metric) is not None]


def _pub_average(published: dict, title: str, suite: Suite, keys,
                 metric: Optional[str] = None) -> Optional[float]:
  name = "Avg" if title == MACRO else title
  cell = published.get("averages", {}).get(name) or {}
  metrics = {metric or suite.dataset(k).metric
             for k in paper_datasets(published, suite, keys, metric)}
  return cell.get(metrics.pop()) if len(metrics) == 1 else None


def _ours(s: dict, key: str, metric: Optional[str]) -> Optional[float]:
  col = s["columns"][key]
  return col.get("paper_metric") if metric is None else col.get("values", {}).get(metric)


def _delta(suite: Suite, s: dict, metric: Optional[str] = None) -> tuple[dict, dict]:
  """(our difference from the published row per column and per average, in `metric` (None:
  each column's own), the datasets each average's difference is over): an average is compared
  over the datasets the paper averages, like for like, and only when every one is here."""
  pub = s["published"]
  if not pub:
    return {}, {}
  d, over = {}, {}
  for spec in suite.datasets:
    ours = _ours(s, spec.key, metric)
    theirs = _pub_value(pub, spec.key, metric or spec.metric)
    if ours is not None and theirs is not None:
      d[spec.key] = ours - theirs
  for title, a in s["averages"].items():
    keys = paper_datasets(pub, suite, a["datasets"], metric)
    theirs = _pub_average(pub, title, suite, a["datasets"], metric)
    ours = [_ours(s, k, metric) for k in keys]
    if theirs is None or not keys or any(x is None for x in ours):
      continue                     # the paper's average needs every one of its datasets
    d[title], over[title] = float(np.mean(ours)) - theirs, keys
  return d, over


def _f(x, digits=1) -> str:
  return "–" if x is None else f"{x:.{digits}f}"


def _grid(suite: Suite, s: dict) -> tuple[list[str], list[list[str]]]:
  """(header, rows) of the table as strings, shared by the markdown and CSV renderings."""
  cols, avgs = s["columns"], s["averages"]
  head = [""] + [cols[k]["name"] for k in suite.keys] + \
      [t if avgs[t]["complete"] else f"{t} ({avgs[t]['present']} of "
       f"{len(avgs[t]['datasets'])})" for t in avgs] + [WEIGHTED]
  rows = []
  n_row = ["questions"]
  for k in suite.keys:
    c = cols[k]
    if c["status"] in ("missing", "not run"):
      n_row.append(c["status"])
    else:
      cell = str(c["n"]) + ("" if c["status"] == "ok" else f" of {c['expected']} (partial)")
      if c["paper_n"] and c["expected"] < c["paper_n"]:
        cell += f" ({'a sample; ' if c.get('sample') else ''}paper {c['paper_n']})"
      n_row.append(cell)
  total = sum(cols[k].get("n", 0) for k in suite.keys)
  rows.append(n_row + [""] * len(avgs) + [str(total)])
  mixed = len({d.metric for d in suite.datasets}) > 1
  for m in suite.all_metrics:
    row = [METRIC_TITLES[m]]
    row += [_f(cols[k].get("values", {}).get(m)) for k in suite.keys]
    row += [_f(avgs[t][m]["macro"]) for t in avgs] + [_f(s["weighted"][m])]
    rows.append(row)
  row = ["searches / question"] + [_f(cols[k].get("searches"), 2) for k in suite.keys]
  rows.append(row + [""] * len(avgs) + [_f(s["searches_weighted"], 2)])
  if mixed:
    row = ["paper metric"] + [
        _f(cols[k].get("paper_metric")) + f" ({METRIC_TITLES[cols[k]['metric']]})"
        for k in suite.keys]
    rows.append(row + [_f(avgs[t]["paper_metric"]["macro"]) for t in avgs]
                + [_f(s["weighted"]["paper_metric"])])
  pub = s["published"]
  if pub:
    by_metric = s.get("delta_by_metric") or {None: s["delta"]}
    for m in by_metric:
      title = "" if m is None else f" {METRIC_TITLES[m]}"
      row = [f"published{title}: {pub['method']} / {pub['model']}"]
      row += [_f(_pub_value(pub, k, m or suite.dataset(k).metric)) for k in suite.keys]
      rows.append(row + [_f(_pub_average(pub, t, suite, avgs[t]["datasets"], m))
                         for t in avgs] + [""])
    for m, d in by_metric.items():
      title = "" if m is None else f" {METRIC_TITLES[m]}"
      row = [f"ours − published{title} (points)"] + [_f(d.get(k), 1) for k in suite.keys]
      rows.append(row + [_f(d.get(t), 1) for t in avgs] + [""])
  return head, rows


def _notes(suite: Suite, s: dict) -> list[str]:
  cols, notes = s["columns"], []
  metric_names = sorted({METRIC_TITLES[d.metric] for d in suite.datasets})
  notes.append(f"Values are percent. Paper metric: {', '.join(metric_names)}. {MACRO}: "
               f"unweighted mean over the datasets present; {WEIGHTED}: every question "
               "counted once; an average is left out (–) where its columns report different "
               "metrics.")
  for k in suite.keys:
    c = cols[k]
    if c["status"] == "missing":
      notes.append(f"{c['name']}: MISSING — {c['file']} is not on this machine; set "
                   f"eval.suites.{suite.name}.datasets.{k}.file (not in any average).")
    elif c["status"] == "not run":
      notes.append(f"{c['name']}: not run (not in --datasets), in no average.")
    elif c["status"] == "partial":
      notes.append(f"{c['name']}: only {c['n']} of {c['expected']} questions have "
                   "predictions (a run that did not finish; run again to resume).")
    elif c.get("sample") and c["paper_n"] and c["expected"] < c["paper_n"]:
      notes.append(f"{c['name']}: a SAMPLE, {c['expected']} of the paper's {c['paper_n']} "
                   f"questions ({c['sample']}): not like for like; point "
                   f"eval.suites.{suite.name}.datasets.{k}.file at the full set.")
    elif c["paper_n"] and c["expected"] < c["paper_n"]:
      notes.append(f"{c['name']}: {c['expected']} questions, the paper's set has "
                   f"{c['paper_n']} (a smaller file or --limit: not like for like).")
  notes += list(suite.notes)
  info = s.get("info") or {}
  if "acc" in suite.all_metrics:
    if info.get("judge"):
      notes.append(f"ACC judged by {info['judge']} ({info.get('judge_unparsed', 0)} of "
                   f"{info.get('judge_calls', 0)} replies in this process unparsed, scored "
                   "False); answers that are missing count as wrong without a call.")
    else:
      notes.append("ACC: no judge configured (eval.judge.url + eval.judge.model, or "
                   "eval.judge.checkpoint), so it is not computed.")
  if s["published"]:
    notes.append(f"Published row: {s['published']['source']}. The difference is left out "
                 "for averages missing a dataset the paper averages.")
    for title, keys in s.get("delta_over", {}).items():
      here = s["averages"][title]["present"]
      if len(keys) != here:
        notes.append(f"ours − published for {title}: over the {len(keys)} datasets the paper "
                     f"averages ({', '.join(cols[k]['name'] for k in keys)}), not the {here} "
                     "here.")
  elif info.get("published_hint"):
    notes.append(info["published_hint"])
  return notes


def render_markdown(suite: Suite, s: dict) -> str:
  head, rows = _grid(suite, s)
  lines = [f"### {s['title']} (suite `{suite.name}`)", ""]
  for k, v in (s.get("info") or {}).items():
    if k in INFO_LINES:
      lines.append(f"- {k}: {v}")
  lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(r) + " |" for r in rows]
  lines += [""] + [f"- {n}" for n in _notes(suite, s)]
  sources = _sources(suite, s)
  if sources:
    lines += ["", "Data files:"] + [f"- {x}" for x in sources]
  return "\n".join(lines)


def _sources(suite: Suite, s: dict) -> list[str]:
  """Which file each column came from, its size and SHA-256 (and the filter applied)."""
  out = []
  for k in suite.keys:
    c = s["columns"][k]
    src = c.get("source")
    if not src:
      continue
    where = ", ".join(f"{f}={v}" for f, v in (c.get("where") or {}).items())
    sha = src.get("sha256", "")
    out.append(f"{c['name']}: {src['path']} ({src['bytes']:,} bytes, sha256 {sha[:16]}"
               f"{'' if src.get('hashed', 'all') == 'all' else ', sampled'})"
               + (f", where {where}" if where else ""))
  return out


def render_csv(suite: Suite, s: dict) -> str:
  head, rows = _grid(suite, s)
  buf = io.StringIO()
  w = csv.writer(buf)
  w.writerow(head)
  for r in rows:
    w.writerow(["" if c == "–" else c for c in r])
  return buf.getvalue()


def write_tables(out_dir: str, summary: dict, stem: str = "table") -> dict:
  os.makedirs(out_dir, exist_ok=True)
  paths = {ext: os.path.join(out_dir, f"{stem}.{ext}") for ext in ("md", "csv", "json")}
  with open(paths["md"], "w", encoding="utf-8") as f:
    f.write(summary["markdown"] + "\n")
  with open(paths["csv"], "w", encoding="utf-8", newline="") as f:
    f.write(summary["csv"])
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump({k: v for k, v in summary.items() if k not in ("markdown", "csv")}, f, indent=1,
              ensure_ascii=False)
  return paths
