"""Question files into the inputs the suites and recipes read: FlashRAG jsonl.

    # one file, any reader format (FlashRAG, verl parquet, raw HotpotQA / 2Wiki / MuSiQue json,
    # UR² multiple choice / math / plain QA) -> FlashRAG jsonl
    python -m ragjax.data.prepare convert IN --format hotpotqa --out hotpot_dev.jsonl

    # every dataset of a suite (configs/suites.py) from a data root -> DIR/<suite>/<key>.jsonl,
    # plus DIR/<suite>/flags.txt pointing the suite at them
    # (python -m ragjax.evaluate ... --suite search_r1 --flagfile DIR/search_r1/flags.txt)
    python -m ragjax.data.prepare suite --suite search_r1 --out DIR [--data_root R]
        [--limit N] [--set triviaqa=/data/triviaqa/test.jsonl[:flashrag] ...]

    # Search-R1's training mixture: NQ train + HotpotQA train, shuffled (seed 42, as AutoRefine)
    python -m ragjax.data.prepare searchr1-train --nq NQ_TRAIN --hotpotqa HQ_TRAIN[:hotpotqa]
        --out DIR [--nq-dev F --hotpotqa-dev F]

Every record is read through `ragjax.data.readers` (a bad one is a `DataError` naming file,
line and field) and written as `Example.to_flashrag()`, so options, supporting titles and the
source name survive.  A dataset the suite names but the data root lacks is listed as missing
(an error before anything is written, unless `--allow-missing`: then the flagfile lists it in
a comment and the evaluation reports it missing), never silently dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from typing import Optional, Sequence

from ragjax.data.readers import READERS, read_examples, read_records
from ragjax.data.schema import example_from_record

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITES_FILE = os.path.join(REPO, "configs", "suites.py")
DEFAULT_DATA_ROOT = os.path.join(os.path.dirname(REPO), "shared", "data")


def write_flashrag(path: str, records: Sequence[dict], data_source: Optional[str] = None) -> str:
  """Writes records (plain dicts) as FlashRAG jsonl; returns the file's sha256."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  h = hashlib.sha256()
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    for i, rec in enumerate(records):
      ex = example_from_record(rec, f"record {i}")
      out = ex.to_flashrag()
      if data_source:
        out["metadata"]["data_source"] = data_source
      line = json.dumps(out, ensure_ascii=False) + "\n"
      h.update(line.encode("utf-8"))
      f.write(line)
  os.replace(tmp, path)
  return h.hexdigest()


def load_suites(path: str = SUITES_FILE) -> dict:
  """The SUITES dict of a suites file (configs/suites.py is data: no ragjax imports)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("ragjax_suites_file", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.SUITES


def prepare_suite(suite: str, out: str, data_root: str, limit: int = 0,
                  overrides: Optional[dict] = None, suites_file: str = SUITES_FILE,
                  allow_missing: bool = False) -> dict:
  """Writes `<out>/<suite>/<key>.jsonl` per dataset found, `flags.txt` and `manifest.json`;
  returns the manifest ({"datasets": {key: {...}}, "missing": {key: path}}).  A dataset whose
  file is not here is an error before anything is written, unless `allow_missing` (then
  flags.txt lists it in a comment and the evaluation reports it missing)."""
  suites = load_suites(suites_file)
  if suite not in suites:
    raise ValueError(f"unknown suite {suite!r}; {suites_file} defines {sorted(suites)}")
  datasets, overrides = suites[suite]["datasets"], dict(overrides or {})
  unknown = sorted(set(overrides) - set(datasets))
  if unknown:
    raise ValueError(f"--set names no dataset of suite {suite!r}: {unknown}; it has "
                     f"{sorted(datasets)}")
  target = os.path.join(os.path.abspath(out), suite)
  manifest = {"suite": suite, "data_root": data_root, "limit": limit, "datasets": {},
              "missing": {}}
  sources = {}
  for key, d in datasets.items():
    src, fmt = d["file"], d.get("format") or None
    if key in overrides:
      src, fmt = overrides[key]
    src = src if os.path.isabs(src) else os.path.join(data_root, src)
    if os.path.isfile(src):
      sources[key] = (src, fmt)
    else:
      manifest["missing"][key] = src
  if manifest["missing"] and not allow_missing:
    key, src = next(iter(manifest["missing"].items()))
    raise FileNotFoundError(f"suite {suite}: {key}: {src} not found (missing: "
                            f"{', '.join(manifest['missing'])}); give --set {key}=PATH[:FORMAT] "
                            "or --allow-missing (nothing written)")
  flags = [f"# MISSING {key}: {src} (the evaluation reports it missing)"
           for key, src in manifest["missing"].items()]
  for key, (src, fmt) in sources.items():
    d = datasets[key]
    records = read_records(src, fmt, d.get("where") or {}, limit)
    if not records:
      raise ValueError(f"{key}: {src} has no question matching {d.get('where')}")
    dst = os.path.join(target, f"{key}.jsonl")
    sha = write_flashrag(dst, records, data_source=key)
    manifest["datasets"][key] = {"source": src, "format": fmt or "(extension)",
                                 "questions": len(records), "file": dst, "sha256": sha}
    prefix = f"--config.eval.suites.{suite}.datasets.{key}"
    flags += [f"{prefix}.file={dst}", f"{prefix}.format=flashrag"]
  os.makedirs(target, exist_ok=True)
  with open(os.path.join(target, "flags.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(flags) + "\n")
  with open(os.path.join(target, "manifest.json"), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=1)
  return manifest


def split_format(arg: str) -> tuple[str, Optional[str]]:
  """'PATH' or 'PATH:FORMAT' (a reader format) -> (path, format or None)."""
  head, colon, tail = arg.rpartition(":")
  return (head, tail) if colon and tail in READERS else (arg, None)


def searchr1_mixture(nq: Sequence[str], hotpotqa: Sequence[str], out: str, *, seed: int = 42,
                     nq_dev: Sequence[str] = (), hotpotqa_dev: Sequence[str] = ()) -> dict:
  """Search-R1's training set: NQ train + HotpotQA train (data_source 'nq' / 'hotpotqa'),
  shuffled with `seed`; the dev files, when given, likewise (for keep-best on dev).  Each
  file is 'PATH' (format from the extension) or 'PATH:FORMAT'."""
  def gather(files_by_source):
    recs = []
    for source, files in files_by_source:
      for arg in files:
        for ex in read_examples(*split_format(arg)):
          rec = ex.to_record()
          rec["data_source"] = source
          recs.append(rec)
    return recs
  written = {}
  for split, parts in (("train", (("nq", nq), ("hotpotqa", hotpotqa))),
                       ("dev", (("nq", nq_dev), ("hotpotqa", hotpotqa_dev)))):
    recs = gather(parts)
    if not recs:
      continue
    seen = {}
    for r in recs:
      key = (r["data_source"], r["id"])
      if key in seen:
        raise ValueError(f"{split}: question id {r['id']!r} of {r['data_source']} appears twice")
      seen[key] = True
    random.Random(seed).shuffle(recs)
    path = os.path.join(out, f"{split}.jsonl")
    written[split] = {"file": path, "questions": len(recs),
                      "by_source": {s: sum(r["data_source"] == s for r in recs)
                                    for s in ("nq", "hotpotqa")},
                      "sha256": write_flashrag(path, recs)}
  if "train" not in written:
    raise ValueError("searchr1-train needs --nq and/or --hotpotqa train files")
  return written


def _parse_set(items: Sequence[str]) -> dict:
  out = {}
  for item in items:
    key, sep, rest = item.partition("=")
    if not sep or not rest:
      raise ValueError(f"--set {item!r}: expected KEY=PATH[:FORMAT]")
    out[key] = split_format(rest)
  return out


def main(argv=None) -> int:
  from ragjax.retrieval.argtypes import non_negative_int
  ap = argparse.ArgumentParser(prog="python -m ragjax.data.prepare", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  c = sub.add_parser("convert", help="one question file -> FlashRAG jsonl")
  c.add_argument("input")
  c.add_argument("--format", choices=sorted(READERS), default=None)
  c.add_argument("--out", required=True)
  c.add_argument("--limit", type=non_negative_int, default=0, help="first N questions (0 = all)")
  s = sub.add_parser("suite", help="a suite's datasets -> FlashRAG jsonl + a flagfile")
  s.add_argument("--suite", required=True)
  s.add_argument("--out", required=True)
  s.add_argument("--data_root", default=DEFAULT_DATA_ROOT)
  s.add_argument("--limit", type=non_negative_int, default=0,
                 help="first N questions of each dataset (0 = all)")
  s.add_argument("--set", action="append", default=[], metavar="KEY=PATH[:FORMAT]",
                 help="read dataset KEY from PATH instead of the suite's file")
  s.add_argument("--suites_file", default=SUITES_FILE)
  s.add_argument("--allow-missing", action="store_true")
  m = sub.add_parser("searchr1-train", help="NQ + HotpotQA train -> the Search-R1 mixture")
  for name in ("nq", "hotpotqa", "nq-dev", "hotpotqa-dev"):
    m.add_argument(f"--{name}", nargs="*", default=[], metavar="PATH[:FORMAT]")
  m.add_argument("--seed", type=int, default=42)
  m.add_argument("--out", required=True)
  args = ap.parse_args(argv)
  from ragjax.errors import exit_on_user_error
  with exit_on_user_error("ragjax.data.prepare"):
    if args.cmd == "convert":
      recs = read_records(args.input, args.format, (), args.limit)
      sha = write_flashrag(args.out, recs)
      print(json.dumps({"out": args.out, "questions": len(recs), "sha256": sha}))
      return 0
    if args.cmd == "suite":
      man = prepare_suite(args.suite, args.out, os.path.abspath(args.data_root), args.limit,
                          _parse_set(args.set), args.suites_file, args.allow_missing)
      for key, path in man["missing"].items():
        print(f"MISSING {key}: {path}", file=sys.stderr)
      print(json.dumps({k: v["questions"] for k, v in man["datasets"].items()}))
      print(f"flags: --flagfile={os.path.join(os.path.abspath(args.out), args.suite, 'flags.txt')}")
      return 0
    written = searchr1_mixture(args.nq, args.hotpotqa, args.out, seed=args.seed,
                               nq_dev=args.nq_dev, hotpotqa_dev=args.hotpotqa_dev)
    print(json.dumps(written, indent=1))
    files = {s: f"('{w['file']}',)" for s, w in written.items()}
    print(f"train with: --config.data.train_files=\"{files['train']}\""
          + (f" --config.data.dev_files=\"{files['dev']}\"" if "dev" in files else ""))
    return 0


if __name__ == "__main__":
  sys.exit(main())
