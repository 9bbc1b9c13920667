"""A/B ablations: two arms that differ by config overrides, started from the same point (the
world's cold start, or the same initial policy) with the same seeds, evaluated on the same
questions, compared question by question.

    report = ablate(c, {"masked": [], "unmasked": ["rl.train_on=('policy','injected')"]})

The shared start lives in the config's workdir itself, so an ablation run on the workdir of an
earlier `python -m ragjax.train` reuses its world, index and cold start (same cold-start
config); each arm trains in `<workdir>/ablation/<arm>/` (and resumes on its own).  The result
is a table of EM per arm and the paired difference B - A with a bootstrap interval, overall and
by question type, plus both arms' full evaluation tables, in `<workdir>/ablation/`.

The comparison and the report are `ragjax.eval.ablation_report` (which also pools the reports
of one ablation run again with other seeds); this module only wires the arms.

An arm whose overrides are the single word `start` (`{"cold_start": ["start"]}`) trains
nothing: it is the shared start itself, evaluated as the other arm is (GRPO vs its cold start).
"""

from __future__ import annotations

import ast
import copy
import importlib
import os
from typing import Mapping, Sequence

from ragjax.eval.ablation_report import ablation_report
from ragjax.typed_config import flatten
from ragjax.wiring import components as parts


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


def ablate(c, arms: Mapping[str, Sequence[str]], *, split: str = "test") -> dict:
  """Runs both arms from one start; returns {"table", "rows", "results", "workdir"}."""
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
  return ablation_report(results[name_a], results[name_b], arms, split, out)
