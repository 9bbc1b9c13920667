"""The comparison of an ablation's two arms, question by question: paired EM rows and
signature rows with bootstrap intervals and McNemar's p, their markdown tables, the report
`ablation.json` / `ablation.md`, and reports of seeds pooled (`pool_reports`).

The arms are run by `ragjax.recipes.ablation.ablate`; this module only compares results.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from ragjax.eval.paired import mcnemar
from ragjax.report.bootstrap import (bootstrap_diff, bootstrap_mean, bootstrap_ratio,
                                     bootstrap_ratio_diff)
from ragjax.typed_config import json_safe, write_json_atomic


def paired_rows(a, b, qtypes: Sequence[str]) -> list[dict]:
  """EM of arm A and B and the paired difference B - A, overall and per question type."""
  rows = []
  for qt in ("all", *qtypes):
    keep = [i for i, q in enumerate(a.qtypes) if qt == "all" or q == qt]
    if not keep:
      continue
    ea, eb = [a.em[i] for i in keep], [b.em[i] for i in keep]
    rows.append({"type": qt, "n": len(keep), "a": bootstrap_mean(ea), "b": bootstrap_mean(eb),
                 "diff": bootstrap_diff(eb, ea), "p": mcnemar(ea, eb)["p"]})
  return rows


def signature_rows(a, b, names: Sequence[str]) -> list[dict]:
  """Each signature metric (`rl.signatures`) of arm A and B on the same questions and the
  paired difference B - A (a ratio bootstrap: the questions a rate applies to may differ
  between arms); McNemar's p where both arms' rate covers the same questions with 0/1 values."""
  rows = []
  for name in names:
    (na, da), (nb, db) = (np.asarray(r.signatures[name], np.float64) for r in (a, b))
    same = np.array_equal(da > 0, db > 0) and set(np.unique(np.r_[na, nb])) <= {0.0, 1.0}
    on = da > 0
    rows.append({"signature": name, "a": bootstrap_ratio(na, da), "b": bootstrap_ratio(nb, db),
                 "diff": bootstrap_ratio_diff(nb, db, na, da),
                 "p": mcnemar(na[on], nb[on])["p"] if same and on.any() else None})
  return rows


def signature_table(rows: Sequence[Mapping], name_a: str, name_b: str) -> str:
  head = ["signature", f"{name_a} (n)", f"{name_b} (n)", f"{name_b} - {name_a} (paired)",
          "McNemar p"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    p = "—" if r["p"] is None else f"{r['p']:.3g}"
    lines.append(f"| {r['signature']} | {r['a']} ({r['a'].n}) | {r['b']} ({r['b'].n}) | "
                 f"{r['diff']} | {p} |")
  return "\n".join(lines)


def paired_table(rows: Sequence[Mapping], name_a: str, name_b: str) -> str:
  head = ["questions", "n", f"EM {name_a}", f"EM {name_b}", f"{name_b} - {name_a} (paired)",
          "McNemar p"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    p = "—" if r["p"] is None else f"{r['p']:.3g}"
    lines.append(f"| {r['type']} | {r['n']} | {r['a']} | {r['b']} | {r['diff']} | {p} |")
  return "\n".join(lines)


def pool_reports(reports: Sequence[Mapping]) -> dict:
  """Reports (`ablation.json`) of one ablation run again with other seeds (`--config.seed`),
  pooled question by question: a question's EM is its mean over the runs and a signature's
  numerator and denominator are summed over the runs, so the bootstrap still draws questions
  (each with all its runs) and its interval counts the runs' spread on a question as well as
  the questions'.  McNemar's test needs one 0/1 pair per question, so pooled rows have none.
  Returns {"table", "rows", "signatures", "runs"}."""
  if len(reports) < 2:
    raise ValueError(f"pooling needs two or more ablation.json reports, got {len(reports)}")
  first = reports[0]
  names = list(first["arms"])
  for r in reports[1:]:
    if list(r["arms"]) != names:
      raise ValueError(f"{r['workdir']}: arms {list(r['arms'])}, not {names}: pool runs of "
                       "the same ablation")
    if r["qtypes"] != first["qtypes"] or r["split"] != first["split"]:
      raise ValueError(f"{r['workdir']}: evaluated on other questions than {first['workdir']}")
  em = {n: np.mean([np.asarray(r["em"][n], np.float64) for r in reports], axis=0)
        for n in names}
  qtypes = list(first["qtypes"])
  rows = []
  for qt in ("all", *dict.fromkeys(qtypes)):
    keep = [i for i, q in enumerate(qtypes) if qt == "all" or q == qt]
    ea, eb = em[names[0]][keep], em[names[1]][keep]
    rows.append({"type": qt, "n": len(keep), "a": bootstrap_mean(ea), "b": bootstrap_mean(eb),
                 "diff": bootstrap_diff(eb, ea), "p": None})
  sig_rows = []
  for sig in first.get("signature_values", {}).get(names[0], {}):
    missing = [r["workdir"] for r in reports if sig not in r.get("signature_values", {})
               .get(names[0], {})]
    if missing:
      raise ValueError(f"{missing[0]}: no per-question values of signature {sig!r} (reports "
                       "before 2026-11-27 lack them: rerun its ablate command, which reuses the "
                       "arms' final checkpoints)")
    (na, da), (nb, db) = [
        [sum(np.asarray(r["signature_values"][n][sig][k], np.float64) for r in reports)
         for k in ("num", "den")] for n in names]
    sig_rows.append({"signature": sig, "a": bootstrap_ratio(na, da), "b": bootstrap_ratio(nb, db),
                     "diff": bootstrap_ratio_diff(nb, db, na, da), "p": None})
  table = paired_table(rows, *names)
  if sig_rows:
    table += "\n\n" + signature_table(sig_rows, *names)
  return {"table": f"Pooled over {len(reports)} runs: "
                   + ", ".join(r["workdir"] for r in reports) + "\n\n" + table,
          "rows": rows, "signatures": sig_rows, "runs": [r["workdir"] for r in reports]}


def ablation_report(a, b, arms: Mapping[str, Sequence[str]], split: str, out: str) -> dict:
  """Arm A's and arm B's evaluation results compared; writes `<out>/ablation.{json,md}` and
  returns the report ({"table", "rows", ..., "workdir": out})."""
  from ragjax.eval.systems import results_table
  (name_a, ov_a), (name_b, ov_b) = arms.items()
  if a.qtypes != b.qtypes:
    raise RuntimeError("the arms were evaluated on different questions")
  qtypes = list(dict.fromkeys(a.qtypes))
  rows = paired_rows(a, b, qtypes)
  table = paired_table(rows, name_a, name_b)
  sig_rows = signature_rows(a, b, list(a.signatures))
  if sig_rows:
    table += "\n\n" + signature_table(sig_rows, name_a, name_b)
  full, _ = results_table([a, b], qtypes)
  report = {"table": table, "full_table": full, "workdir": out, "split": split,
            "arms": {name_a: list(ov_a), name_b: list(ov_b)},
            "rows": [{"type": r["type"], "n": r["n"], "a": str(r["a"]), "b": str(r["b"]),
                      "diff": str(r["diff"]), "mcnemar_p": r["p"], "diff_mean": r["diff"].mean,
                      "diff_low": r["diff"].low, "diff_high": r["diff"].high} for r in rows],
            "signatures": [{"name": r["signature"], "a": str(r["a"]), "b": str(r["b"]),
                            "n_a": r["a"].n, "n_b": r["b"].n, "diff": str(r["diff"]),
                            "diff_mean": r["diff"].mean, "diff_low": r["diff"].low,
                            "diff_high": r["diff"].high, "mcnemar_p": r["p"]}
                           for r in sig_rows],
            "em": {name_a: json_safe(np.asarray(a.em).tolist()),
                   name_b: json_safe(np.asarray(b.em).tolist())},
            # per question (num, den) of each signature, for `pool_reports`
            "signature_values": {
                name: {sig: {"num": json_safe(np.asarray(v[0], np.float64).tolist()),
                             "den": json_safe(np.asarray(v[1], np.float64).tolist())}
                       for sig, v in res.signatures.items()}
                for name, res in ((name_a, a), (name_b, b))},
            "qtypes": a.qtypes}
  write_json_atomic(os.path.join(out, "ablation.json"), report)
  with open(os.path.join(out, "ablation.md"), "w") as f:
    f.write(f"# Ablation on {split}: {name_b} vs {name_a}\n\n{table}\n\n{full}\n")
  return report
