"""Benchmark suites read from a config's `eval.suites` section (configs/suites.py).

    suite = get_suite(c.eval, "search_r1")
    root = data_root(c.eval)                      # "" -> ../shared/data beside the repo
    for ds in suite.datasets:
      path = ds.path(root)                        # None when the file is not on this machine
      records = read_dataset(ds, root, limit=0)

A suite is data, not code: datasets (file, format, metadata filter, the paper's set size, the
column's own metric), column order and groups, the metric set, the protocol / sampler
settings the paper pinned, decoding and the judge template.  Every field is checked here, so
a typo fails before a model is loaded, naming `eval.suites.<suite>.<field>`.

    suite = add_datasets(suite, ["ambigqa=/d/ambigqa.jsonl,format=flashrag,metric=em"])
    part = select_datasets(suite, ["nq", "ambigqa"])        # --datasets
    check_overrides(suite, ["protocol.top_k"])              # ValueError: the suite pins it
    suite.metrics_of("nq")                                  # what column nq reports
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ragjax.data.prepare import DEFAULT_DATA_ROOT, REPO  # noqa: F401  (REPO: published.py)

METRICS = ("em", "f1", "cover_em", "letter_em", "math_equiv", "acc")
# Column metrics that stand alone: a multiple-choice or math column reports only its own
# metric (EM / F1 / cover-EM of a letter or a formula mean nothing).
OWN_ONLY = ("letter_em", "math_equiv")
METRIC_TITLES = {"em": "EM", "f1": "F1", "cover_em": "cover-EM", "letter_em": "letter EM",
                 "math_equiv": "math equiv.", "acc": "ACC (judge)"}


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  key: str
  name: str
  file: str
  format: str = ""                     # "" = from the extension
  where: tuple = ()                    # ((metadata field, value), ...)
  paper_n: int = 0
  metric: str = "em"
  protocol: tuple = ()                 # ((protocol field, value), ...) over the suite's
  sample: str = ""                     # how `file` samples the paper's set ("": it does not)

  def path(self, root: str) -> Optional[str]:
    """The file on this machine (absolute `file` or under `root`), or None if absent."""
    p = self.file if os.path.isabs(self.file) else os.path.join(root, self.file)
    return p if os.path.isfile(p) else None

  def wanted(self, root: str) -> str:
    return self.file if os.path.isabs(self.file) else os.path.join(root, self.file)


@dataclasses.dataclass(frozen=True)
class Suite:
  name: str
  title: str
  source: str
  paper_table: str
  datasets: tuple                      # DatasetSpec, in column order
  groups: tuple                        # ((group title, (keys...)), ...)
  metrics: tuple
  protocol: tuple                      # ((field, value), ...)
  sampler: tuple
  greedy: bool
  temperature: float
  top_p: float
  judge_template: str
  notes: tuple = ()

  @property
  def keys(self) -> tuple:
    return tuple(d.key for d in self.datasets)

  def dataset(self, key: str) -> DatasetSpec:
    for d in self.datasets:
      if d.key == key:
        return d
    raise KeyError(f"suite {self.name!r} has no dataset {key!r}; it has {list(self.keys)}")

  @property
  def all_metrics(self) -> tuple:
    """The suite's metrics plus each column's own, in METRICS order."""
    want = set(self.metrics) | {d.metric for d in self.datasets}
    return tuple(m for m in METRICS if m in want)

  def metrics_of(self, key: str) -> tuple:
    """The metrics column `key` reports: its own, plus the suite's unless its own is a
    multiple-choice or math metric (`OWN_ONLY`), in METRICS order."""
    own = self.dataset(key).metric
    want = {own} if own in OWN_ONLY else set(self.metrics) | {own}
    return tuple(m for m in METRICS if m in want)

  def settings(self) -> dict:
    """The suite-wide settings that decide the predictions (run.json; each dataset's own are
    `ragjax.eval.harness.dataset_settings`)."""
    return {"protocol": dict(self.protocol), "sampler": dict(self.sampler),
            "greedy": self.greedy, "temperature": self.temperature, "top_p": self.top_p}


def _plain(x):
  return x.to_dict() if hasattr(x, "to_dict") else x


def _items(x, where: str) -> tuple:
  """A mapping's items, sorted; None values (a field the section leaves to the method config,
  present so the command line can set it) are dropped."""
  x = _plain(x) or {}
  if not isinstance(x, dict):
    raise ValueError(f"{where}: expected a mapping, got {type(x).__name__}")
  return tuple(sorted((k, v) for k, v in x.items() if v is not None))


_SUITE_FIELDS = {"title", "source", "paper_table", "datasets", "columns", "groups", "metrics",
                 "protocol", "sampler", "greedy", "temperature", "top_p", "judge_template",
                 "notes"}
_DATASET_FIELDS = {"name", "file", "format", "where", "paper_n", "metric", "protocol", "sample"}


def get_suite(eval_section, name: str) -> Suite:
  """The named suite of a config's `eval` section, validated."""
  suites = _plain(eval_section["suites"] if isinstance(eval_section, dict)
                  else eval_section.suites)
  if name not in suites:
    raise ValueError(f"unknown suite {name!r}; the config defines {sorted(suites)} "
                     "(eval.suites, configs/suites.py)")
  s, path = suites[name], f"eval.suites.{name}"
  unknown = sorted(set(s) - _SUITE_FIELDS)
  missing = sorted({"datasets", "columns", "metrics"} - set(s))
  if unknown or missing:
    raise ValueError(f"{path}: unknown field(s) {unknown}, missing {missing}")
  columns = tuple(s["columns"])
  datasets = s["datasets"]
  if sorted(columns) != sorted(datasets) or len(set(columns)) != len(columns):
    raise ValueError(f"{path}.columns {list(columns)} must list each of datasets "
                     f"{sorted(datasets)} once")
  specs = [_dataset_spec(key, datasets[key], f"{path}.datasets.{key}") for key in columns]
  metrics = tuple(s["metrics"])
  for m in metrics:
    if m not in METRICS:
      raise ValueError(f"{path}.metrics: unknown metric {m!r}; known: {list(METRICS)}")
  groups = []
  for title, keys in (_plain(s.get("groups")) or {}).items():
    missing = [k for k in keys if k not in datasets]
    if missing:
      raise ValueError(f"{path}.groups.{title}: no dataset(s) {missing}")
    groups.append((title, tuple(keys)))
  order = {k: i for i, k in enumerate(columns)}
  groups.sort(key=lambda g: min(order[k] for k in g[1]))
  judge_template = s.get("judge_template") or ""
  if "acc" in metrics or any(d.metric == "acc" for d in specs):
    if not judge_template:
      raise ValueError(f"{path}: metric 'acc' needs judge_template (e.g. 'r3_answer')")
  return Suite(name=name, title=s.get("title") or name, source=s.get("source") or "",
               paper_table=s.get("paper_table") or "", datasets=tuple(specs),
               groups=tuple(groups), metrics=metrics, protocol=_items(s.get("protocol"), path),
               sampler=_items(s.get("sampler"), f"{path}.sampler"),
               greedy=bool(s.get("greedy", True)), temperature=float(s.get("temperature", 0.0)),
               top_p=float(s.get("top_p", 1.0)), judge_template=judge_template,
               notes=tuple(s.get("notes") or ()))


def _dataset_spec(key: str, d: dict, dpath: str) -> DatasetSpec:
  from ragjax.data.readers import READERS
  d = _plain(d)
  if not isinstance(d, dict):
    raise ValueError(f"{dpath}: expected a mapping, got {type(d).__name__}")
  bad = sorted(set(d) - _DATASET_FIELDS)
  if bad or not d.get("file"):
    raise ValueError(f"{dpath}: unknown field(s) {bad}; known: {sorted(_DATASET_FIELDS)}"
                     if bad else f"{dpath}: no file")
  try:
    paper_n = int(d.get("paper_n") or 0)
  except (TypeError, ValueError):
    raise ValueError(f"{dpath}.paper_n={d.get('paper_n')!r}: not a number") from None
  spec = DatasetSpec(key=key, name=str(d.get("name") or key), file=str(d["file"]),
                     format=d.get("format") or "", where=_items(d.get("where"), f"{dpath}.where"),
                     paper_n=paper_n, metric=d.get("metric") or "em",
                     protocol=_items(d.get("protocol"), f"{dpath}.protocol"),
                     sample=str(d.get("sample") or ""))
  if spec.format and spec.format not in READERS:
    raise ValueError(f"{dpath}.format={spec.format!r}; known: {sorted(READERS)}")
  if spec.metric not in METRICS:
    raise ValueError(f"{dpath}.metric={spec.metric!r}; known: {list(METRICS)}")
  return spec


def did_you_mean(word: str, options) -> str:
  import difflib
  close = difflib.get_close_matches(word, list(options), n=1)
  return f" (did you mean {close[0]}?)" if close else ""


def select_datasets(suite: Suite, keys) -> Suite:
  """The suite with only the datasets `keys` (`--datasets`), in the suite's column order."""
  keys = [k.strip() for k in keys if k.strip()]
  for k in keys:
    if k not in suite.keys:
      raise ValueError(f"--datasets: suite {suite.name} has no dataset {k}"
                       f"{did_you_mean(k, suite.keys)}; its datasets: {', '.join(suite.keys)}")
  if not keys:
    raise ValueError(f"--datasets is empty; suite {suite.name}'s datasets: "
                     f"{', '.join(suite.keys)}")
  return dataclasses.replace(suite, datasets=tuple(d for d in suite.datasets if d.key in keys))


ADD_DATASET_HELP = ("KEY=FILE[,format=F][,metric=M][,name=TITLE][,paper_n=N][,where.FIELD=V]"
                    "[,protocol.FIELD=V]")


def _literal(text: str):
  import ast
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def parse_dataset_arg(arg: str) -> tuple[str, dict]:
  """`--add_dataset` text (ADD_DATASET_HELP) -> (key, the dataset's suite fields)."""
  import re
  head, *rest = arg.split(",")
  key, sep, file = head.partition("=")
  key = key.strip()
  if not sep or not file.strip() or not re.fullmatch(r"[A-Za-z0-9_\-]+", key):
    raise ValueError(f"--add_dataset {arg!r}: expected {ADD_DATASET_HELP}")
  d: dict = {"file": file.strip()}
  for item in rest:
    name, sep, value = item.partition("=")
    name = name.strip()
    section, dot, field = name.partition(".")
    if not sep or (dot and (section not in ("where", "protocol") or not field)) or \
        (not dot and name not in ("name", "format", "metric", "paper_n")):
      raise ValueError(f"--add_dataset {key}: cannot read {item!r}; expected {ADD_DATASET_HELP}")
    if dot:
      d.setdefault(section, {})[field] = _literal(value.strip())
    else:
      d[name] = value.strip()
  return key, d


def add_datasets(suite: Suite, args) -> Suite:
  """The suite with datasets given on the command line (`--add_dataset`, ADD_DATASET_HELP)
  as new columns after its own; they are in no group and not in the paper's averages."""
  specs = list(suite.datasets)
  for arg in args:
    key, d = parse_dataset_arg(arg)
    if key in [s.key for s in specs]:
      raise ValueError(f"--add_dataset {key}: suite {suite.name} already has a dataset {key}; "
                       f"point it at another file with "
                       f"--config.eval.suites.{suite.name}.datasets.{key}.file=PATH")
    specs.append(_dataset_spec(key, d, f"--add_dataset {key}"))
  return dataclasses.replace(suite, datasets=tuple(specs))


# Sampler fields a suite's decoding replaces (greedy decoding ignores top_k too): given on the
# command line they would be silently overridden, so `check_overrides` refuses them.
_DECODING_FIELDS = ("greedy", "temperature", "temperatures", "top_p")
_GREEDY_IGNORES = _DECODING_FIELDS + ("top_k",)


def check_overrides(suite: Suite, overrides) -> None:
  """Refuses a command-line override (`--config.FIELD=V`, dotted paths in `overrides`) of a
  setting the suite pins, naming the suite's field to change instead."""
  pinned = {f"protocol.{k}": (f"protocol.{k}", v) for k, v in suite.protocol}
  for d in suite.datasets:
    for k, v in d.protocol:
      pinned.setdefault(f"protocol.{k}", (f"datasets.{d.key}.protocol.{k}", v))
  pinned.update({f"sampler.{k}": (f"sampler.{k}", v) for k, v in suite.sampler})
  for k in _GREEDY_IGNORES if suite.greedy else _DECODING_FIELDS:
    what = "greedy" if suite.greedy else (k if k in ("temperature", "top_p") else "temperature")
    pinned.setdefault(f"sampler.{k}", (what, True if suite.greedy else getattr(suite, what)))
  for path in overrides:
    if path in pinned:
      field, value = pinned[path]
      raise ValueError(f"--config.{path}: suite {suite.name} pins {field}={value!r} (the "
                       f"paper's protocol), which would override it; change the suite's "
                       f"instead: --config.eval.suites.{suite.name}.{field}=...")


def data_root(eval_section, override: Optional[str] = None) -> str:
  root = override or (eval_section.get("data_root") if isinstance(eval_section, dict)
                      else eval_section.data_root) or DEFAULT_DATA_ROOT
  return os.path.abspath(os.path.expanduser(root))


def read_dataset(spec: DatasetSpec, root: str, limit: int = 0) -> list[dict]:
  """The dataset's records (plain dicts), filtered by `where`, the first `limit` if > 0."""
  from ragjax.data.readers import read_records
  path = spec.path(root)
  if path is None:
    raise FileNotFoundError(f"{spec.key}: {spec.wanted(root)} not found")
  out = read_records(path, spec.format or None, spec.where, limit)
  if not out:
    raise ValueError(f"{spec.key}: {path} has no question matching {dict(spec.where)}")
  return out
