"""A/B ablations: two arms that differ by config overrides, started from the same point (the
world's cold start, or the same initial policy) with the same seeds, evaluated on the same
questions, compared question by question.

    report = ablate(c, {"masked": [], "unmasked": ["rl.train_on=('policy','injected')"]})

The shared start lives in the config's workdir itself, so an ablation run on the workdir of an
earlier `python -m ragjax.train` reuses its world, index and cold start (same cold-start
config); each arm trains in `<workdir>/ablation/<arm>/` (and resumes on its own).  The result
is a table of EM per arm and the paired difference B - A with a bootstrap interval, overall and
by question type, plus both arms' full evaluation tables, in `<workdir>/ablation/`.

`pool_reports` pools the reports of one ablation run again with other seeds
(`python -m ragjax.ablate --pool=A/ablation.json,B/ablation.json`).

An arm whose overrides are the single word `start` (`{"cold_start": ["start"]}`) trains
nothing: it is the shared start itself, evaluated as the other arm is (GRPO vs its cold start).
"""

from __future__ import annotations

import ast
import copy
import importlib
import os
from typing import Mapping, Sequence

import numpy as np

from ragjax.eval.paired import mcnemar
from ragjax.wiring import components as parts
from ragjax.report.bootstrap import (bootstrap_diff, bootstrap_mean, bootstrap_ratio,
                                     bootstrap_ratio_diff)
from ragjax.typed_config import flatten, json_safe, write_json_atomic


START_ARM = "start"     # an arm's only override: the shared start, untrained


def apply_overrides(c, overrides: Sequence[str]):
  """A copy of `c` with `field.path=value` overrides (values parsed as Python literals, else
  strings), each checked against the schema: an unknown field is an error naming it.  Overrides
  land before references resolve, so a switch other fields refer to (REX-RAG's
  `rex_rag.pool`, read by its hook and its behaviour) changes them all, as on the command line."""
  c = copy.deepcopy(c)          # keeps the copy's own field references, detached from `c`
  known = flatten(c)
  for ov in overrides:
    if "=" not in ov:
      raise ValueError(f"override {ov!r} is not FIELD=VALUE")
    key, raw = ov.split("=", 1)
    key = key.strip().removeprefix("--config.")
    if key not in known and not any(k.startswith(key + ".") for k in known):
      raise ValueError(f"override {key!r}: no such config field")
    try:
      value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
      value = raw
    node = c
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    try:
      node[leaf] = value
    except TypeError:              # ml-collections: a value of another type than the field's
      raise ValueError(f"override {key}={raw}: {key} takes a {type(node[leaf]).__name__}, "
                       f"got {value!r}") from None
  return c.copy_and_resolve_references()


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


def ablate(c, arms: Mapping[str, Sequence[str]], *, split: str = "test") -> dict:
  """Runs both arms from one start; returns {"table", "rows", "results", "workdir"}."""
  from ragjax.eval.systems import results_table
  if len(arms) != 2:
    raise ValueError(f"an ablation has two arms, got {list(arms)}")
  (name_a, ov_a), (name_b, ov_b) = arms.items()
  workdir = os.path.abspath(c.workdir)
  recipe = importlib.import_module(f"ragjax.recipes.{c.recipe}")
  if not hasattr(recipe, "start"):
    raise ValueError(f"recipe {c.recipe!r} has no shared start (ragjax.recipes.{c.recipe}.start)")
  untrained = {name for name, ov in arms.items() if list(ov) == [START_ARM]}
  if len(untrained) == 2:
    raise ValueError(f"both arms are {START_ARM!r}: one of them has to train")
  configs = {name: apply_overrides(c, [] if name in untrained else ov)
             for name, ov in ((name_a, ov_a), (name_b, ov_b))}
  for name, cfg in configs.items():
    cfg.workdir = workdir
    parts.validate(cfg)
  s = recipe.start(configs[name_a])
  if hasattr(recipe, "start_fingerprint"):
    same = recipe.start_fingerprint(configs[name_a]) == recipe.start_fingerprint(configs[name_b])
    if not same:
      raise ValueError("the two arms' overrides change the shared start (e.g. the cold start's "
                       "sections); an ablation compares RL settings from one start")
  # A recipe with its own trainer or evaluation layout (R3-RAG: step samples, judge services,
  # its evaluation protocol) provides them; the rest use the shared parts.
  make_trainer = getattr(recipe, "make_trainer", parts.make_trainer)
  evaluate_policies = getattr(recipe, "evaluate_policies", parts.evaluate_policies)
  results = {}
  out = os.path.join(workdir, "ablation")
  for name, cfg in configs.items():
    cfg.workdir = os.path.join(out, name)
    run = parts.validate(cfg)
    if name in untrained:
      params = s.params
    else:
      trainer = make_trainer(cfg, run, s.cfg, s.params, s.tokenizer, s.setup, s.mesh)
      trainer.train()
      params = trainer.final_params()
      trainer.ckpt.close()
    results[name] = evaluate_policies(cfg, s, ((name, params, True),), splits=(split,))[0]
  a, b = results[name_a], results[name_b]
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
