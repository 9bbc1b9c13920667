"""`python -m ragjax.tools.fuzz --count N`: hostile policy outputs through every method's pipeline.

For each method config (`METHODS`: every registered protocol (`ragjax.registry`, "protocol") is
some method's), N hostile outputs (`ragjax.tools.fuzz_outputs`: unclosed, nested, repeated and
mis-cased tags, actions split across turns, empty and 10k-character queries, invalid UTF-8
byte tokens, other protocols' grammars, only eos, junk) go, as token ids a policy emits,
through what a training step runs on them:

  * the real `RolloutEngine` with the config's protocol, hooks (REX-RAG's clones) and loop
    settings, the config's retriever (BM25 over the tiny synthetic world) and tokenizer (the
    world's byte-level BPE);
  * every reward the config names, with its kwargs and services (R3-RAG's gold judge, ReZero's
    frozen-base judge: the config's tiny policy with random weights), and every metric; the
    step samples when the config trains on them;
  * the trajectory dump and viewer (`ragjax.rollout.dump`, `ragjax.rollout.viewer`).

Checked on every batch: nothing raises; every row ends with a non-empty stop reason (and an
answer iff it stopped on one); labels, loss mask and log-probs line up with the tokens: the
policy's log-prob of each token it wrote is its cache slot's, so a token labelled POLICY that
the policy did not write at that place, or a policy token labelled otherwise, shows; the
sampler's history equals the row; the dump's spans re-assemble to the row's tokens and labels.

The policy is `ragjax.rollout.teacher.TeacherPolicy` (the package's forced-text policy) wrapped
to report slot log-probs: a tool researchers run on their own protocols and plug-ins (gin-bound
rewards and metrics are looked up like built-ins), not a test double.

    python -m ragjax.tools.fuzz --count 10000            # per method; prints a markdown table
    python -m ragjax.tools.fuzz --count 200 --methods configs/ur2.py:tiny --failures f.jsonl
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import inspect
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from typing import Optional, Sequence

import numpy as np

# (method config, config whose world / tokenizer / retriever it runs on when it names real data)
METHODS = (
    ("configs/search_r1.py:tiny", None),
    ("configs/rex_rag.py:tiny", None),
    ("configs/rex_rag.py:qwen2.5-3b", "configs/rex_rag.py:tiny"),
    ("configs/autorefine.py:tiny", None),
    ("configs/r3_rag.py:tiny", None),
    ("configs/ur2.py:tiny", None),
    ("configs/rezero.py:tiny", None),
    ("configs/world.py:toy", None),
    # the direct-answer baseline of the qa recipe (ragjax.recipes.qa): one final turn, no search
    ("configs/search_r1.py:tiny protocol.name=direct protocol.max_turns=0", None),
    # the retrieve-once baseline of `python -m ragjax.compare`: the direct answer's one turn,
    # its prompt holding the question's passages when the record has them
    ("configs/search_r1.py:tiny protocol.name=retrieve_once protocol.max_turns=0", None),
)


def slot_logprob(slot: int) -> float:
  """The log-prob the fuzz policy reports for a token it writes at cache slot `slot`."""
  return -(slot + 1) / 1000.0


class FuzzPolicy:
  """A `ragjax.rollout.policy.Policy`: row r emits `script(r)`'s items (a `TeacherPolicy` does
  the emitting) and reports `slot_logprob` for every token, so alignment is checkable.  Counts
  the outputs each row really decoded, by kind."""

  def __init__(self, tok, script, stop_strings, eos_ids, max_new_tokens, cache_length,
               max_extend: Optional[int] = None):
    self.tok, self.script = tok, script
    self.stop_strings, self.eos_ids = tuple(stop_strings), tuple(eos_ids)
    self.max_new_tokens, self.cache_length = max_new_tokens, cache_length
    self.max_extend = max_extend
    self.tried: collections.Counter = collections.Counter()
    self.scripts, self.kinds, self.teacher = [], [], None

  def set_params(self, params) -> None:
    """Forced outputs have no weights."""

  def prefill(self, prompts, samples_per_prompt=1, seed=0, first_row=0):
    from ragjax.rollout.teacher import TeacherPolicy
    n = len(prompts) * samples_per_prompt
    drawn = [self.script(first_row + r) for r in range(n)]
    self.scripts, self.kinds = [d[0] for d in drawn], [d[1] for d in drawn]
    self.teacher = TeacherPolicy(self.tok, self.scripts, self.stop_strings, self.eos_ids,
                                 self.max_new_tokens, self.cache_length)
    self.state = self.teacher.prefill(prompts, samples_per_prompt, seed, first_row)
    return self.state

  def decode(self, state):
    before = [len(h) for h in state.histories]
    for r in range(state.batch_size):
      if not state.finished[r] and state.cursor[r] < len(self.kinds[r]):
        self.tried[self.kinds[r][state.cursor[r]]] += 1
    state, out = self.teacher.decode(state)
    lps = np.zeros_like(np.asarray(out.logprobs))
    for r, n in enumerate(np.asarray(out.lengths)):
      lps[r, :n] = [slot_logprob(before[r] + j) for j in range(n)]
    return state, dataclasses.replace(out, logprobs=lps, sampling_logprobs=lps)

  def extend(self, state, rows, token_lists):
    if self.max_extend is not None and any(len(t) > self.max_extend for t in token_lists):
      raise ValueError(f"extend: more than {self.max_extend} tokens in one call")
    return self.teacher.extend(state, rows, token_lists)

  def set_done(self, state, rows):
    return self.teacher.set_done(state, rows)

  def clone_rows(self, state, src, dst):
    return self.teacher.clone_rows(state, src, dst)

  def truncate(self, state, rows, new_lengths):
    return self.teacher.truncate(state, rows, new_lengths)


def check_batch(batch, histories, dump_records) -> list[str]:
  """Violations of the rollout contract in `batch` (empty when it holds)."""
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.labels import Source
  t = batch.traj
  tokens, labels = np.asarray(t.tokens), np.asarray(t.labels)
  lps, turn = np.asarray(t.sampler_logprobs), np.asarray(t.turn)
  mask = loss_mask(t.labels, ("policy", "injected"))
  bad = []
  for i, meta in enumerate(batch.meta.rows):
    k, p = int(t.lengths[i]), int(t.prompt_lengths[i])
    where = f"row {i}"
    if not (isinstance(meta.stop_reason, str) and meta.stop_reason):
      bad.append(f"{where}: no stop reason")
    if (meta.answer is not None) != (meta.stop_reason == "answer"):
      bad.append(f"{where}: answer {meta.answer!r} with stop reason {meta.stop_reason!r}")
    if (labels[i, k:] != Source.PAD).any() or (labels[i, :k] == Source.PAD).any():
      bad.append(f"{where}: padding labels do not match length {k}")
    if (labels[i, :p] != Source.PROMPT).any() or (labels[i, p:k] == Source.PROMPT).any():
      bad.append(f"{where}: prompt labels do not match prompt length {p}")
    if (turn[i, :p] != -1).any() or (turn[i, p:k] < 0).any():
      bad.append(f"{where}: turn ids do not match the prompt / response split")
    untrained = np.isin(labels[i], [int(Source.RETRIEVED), int(Source.ENV), int(Source.PROMPT),
                                    int(Source.PAD)])
    if mask[i][untrained].any():
      bad.append(f"{where}: loss on retrieved / environment / prompt / padding tokens")
    pos = np.nonzero(labels[i, :k] == Source.POLICY)[0]
    if not np.allclose(lps[i, pos], [slot_logprob(j) for j in pos], atol=1e-6):
      bad.append(f"{where}: a POLICY-labelled token is not the policy's token at its slot")
    if (lps[i][labels[i] != Source.POLICY] != 0).any():
      bad.append(f"{where}: a log-prob on a token the policy did not write")
    if histories[meta.sampler_row][:k] != tokens[i, :k].tolist():
      bad.append(f"{where}: the sampler's history differs from the trajectory")
    spans = dump_records[i]["spans"]
    if [x for s in spans for x in s["ids"]] != tokens[i, :k].tolist():
      bad.append(f"{where}: the dump's spans do not re-assemble to the row's tokens")
    if [Source[s["label"]].value for s in spans for _ in s["ids"]] != labels[i, :k].tolist():
      bad.append(f"{where}: the dump's span labels do not re-assemble to the row's labels")
  return bad


@dataclasses.dataclass
class MethodReport:
  method: str
  protocol: str
  outputs: int = 0                   # hostile outputs decoded by the policy
  batches: int = 0
  rows: int = 0
  crashes: int = 0                   # batches where something raised
  violations: int = 0                # batches with a broken invariant
  stop_reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  searches: int = 0                  # queries the retriever answered
  longest_query: int = 0             # characters
  clones: int = 0                    # rows a hook added (REX-RAG)
  service_calls: int = 0             # judge requests
  rewards: tuple = ()
  metrics: tuple = ()
  skipped: dict = dataclasses.field(default_factory=dict)   # what did not run, and why
  failures: list = dataclasses.field(default_factory=list)  # first few, with their scripts
  seconds: float = 0.0


class Method:
  """One method config's pipeline on its tiny world (see the module docstring)."""

  def __init__(self, spec: str, setup_spec: Optional[str], workdir: str, setups: dict):
    from ragjax.wiring import components as parts
    from ragjax.wiring.chat_services import make_services
    from ragjax.wiring.config_files import apply_overrides, load_config
    from ragjax.rl.rewards import get_reward
    from ragjax.rollout.factory import engine_config, make_hooks, protocol_from_config
    from ragjax import registry
    self.spec = spec
    # a spec is `FILE.py[:ARG]`, then any `section.field=value` overrides, space-separated
    file_spec, *overrides = spec.split()
    c = self.c = apply_overrides(load_config(file_spec), overrides)
    sc = load_config(setup_spec) if setup_spec else c
    if sc.data.source != "world":
      raise ValueError(f"{spec}: reads real data; give a tiny config to run on")
    key = json.dumps([sc.world.to_dict(), sc.tokenizer.to_dict(), sc.retriever.backend],
                     sort_keys=True, default=str)
    if key not in setups:
      setups[key] = parts.load_data(sc, os.path.join(workdir, f"world{len(setups)}"))
    self.setup = s = setups[key]
    self.tok = s.tokenizer
    self.protocol = protocol_from_config(c)
    self.records = [r for split in ("train", "dev") for r in s.splits[split]]
    self.hooks_fn = lambda: make_hooks(c)
    pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
    self.engine_config = dataclasses.replace(engine_config(c, pad), widths=None, wave_rows=0)
    self.rewards = dict(c.rl.rewards)
    self.reward_kwargs = {k: dict(v) for k, v in dict(c.rl.reward_kwargs).items()}
    self.metrics = {m: registry.lookup("metric", m) for m in c.rl.metrics}
    for name in self.rewards:
      get_reward(name)
    self.skipped = {}
    kind = c.judge.kind if "judge" in c else ""
    if kind in ("url", "checkpoint"):
      self.services = {}
      needs = [r for r in self.rewards if "judge" in str(self.reward_kwargs.get(r, {}))
               or r in ("r3_rag", "rezero_correctness")]
      for r in needs:
        self.skipped[f"reward {r}"] = f"judge.kind={kind!r} needs a served or saved model"
      self.rewards = {r: w for r, w in self.rewards.items() if r not in needs}
    else:
      policy = parts.load_policy(c, self.tok) if kind == "base" else (None, None, self.tok)
      self.services = make_services(c, *policy, setup=s)
    self.step_samples = bool(c.rl.get("step_samples", False))
    self.words = sorted({r["metadata"]["hops"][0]["entity"] for r in self.records
                         if r.get("metadata", {}).get("hops")} | {"Quillport"})

  def run(self, count: int, seed: int, keep_failures: int = 5,
          failures_path: Optional[str] = None, time_limit: float = 0.0,
          within_config: bool = False) -> MethodReport:
    """Fuzzes until `count` outputs were decoded.  Per-turn token budgets and cache sizes are
    drawn beyond what the config's sampler allows (up to 12,000 tokens a turn, so 10k-character
    queries reach the retriever), unless `within_config` caps them at `sampler.max_new_tokens`
    and `sampler.max_cache_length` (what a run of this config can meet)."""
    from ragjax.rollout.engine import RolloutEngine
    from ragjax.tools.fuzz_outputs import KINDS, Fuzzer
    rep = MethodReport(self.spec, self.protocol.name, rewards=tuple(self.rewards),
                       metrics=tuple(self.metrics), skipped=dict(self.skipped))
    fz = Fuzzer(self.protocol.name, self.tok, self.words)
    kinds = KINDS if fz.bytes is not None else tuple(k for k in KINDS if k != "invalid_utf8")
    if fz.bytes is None:
      rep.skipped["invalid_utf8"] = "the tokenizer is not byte-level"
    t0 = time.perf_counter()
    b = 0
    while rep.outputs < count and not (time_limit and time.perf_counter() - t0 > time_limit):
      rng = random.Random(seed * 1_000_003 + b)
      scripts = {}

      def script(r, rng=rng, scripts=scripts):
        scripts[r] = fz.row_script(rng, kinds)
        return scripts[r]

      prompts = rng.sample(self.records, rng.randint(1, 3))
      group = rng.randint(1, 3)
      long = rng.random() < 0.25
      new_tokens = rng.choice([1, 8, 32, 64, 256] + ([12_000] if long else []))
      room = rng.choice([8, 40, 400, 4000] + ([16_000] if long else [])) + rng.randint(0, 64)
      pol = FuzzPolicy(self.tok, script, self.protocol.stop_sequences,
                       (self.tok.eos_token_id,), new_tokens, 0,
                       max_extend=rng.choice([None, 64]))
      eng = RolloutEngine(self.protocol, pol, self.setup.retriever, self.tok,
                          self.engine_config, hooks=self.hooks_fn())
      longest = max(len(eng.renderer.prompt_ids(p)) for p in prompts)
      pol.cache_length = longest + room
      if within_config:
        pol.max_new_tokens = min(new_tokens, int(self.c.sampler.max_new_tokens))
        pol.cache_length = max(longest + 1, min(pol.cache_length,
                                                int(self.c.sampler.max_cache_length)))
      stage = "rollout"
      try:
        batch = eng.run(prompts, samples_per_prompt=group, seed=b)
        stage = "rewards, metrics, dump"
        problems, records = self._downstream(batch, prompts, group)
        problems += check_batch(batch, pol.state.histories, records)
      except Exception as e:  # the fuzz counts every raise as a crash and keeps going
        rep.crashes += 1
        problems = [f"{stage}: {type(e).__name__}: {e}",
                    "".join(traceback.format_exception(e)[-3:])]
        batch = None
      rep.outputs += sum(pol.tried.values())
      rep.kinds.update(pol.tried)
      rep.batches += 1
      if batch is not None:
        rep.rows += len(batch.meta.rows)
        rep.stop_reasons.update(m.stop_reason or "(none)" for m in batch.meta.rows)
        rep.clones += sum(m.clone_of is not None for m in batch.meta.rows)
        queries = [t.query or "" for m in batch.meta.rows for t in m.turns if t.action == "search"]
        rep.searches += len(queries)
        rep.longest_query = max([rep.longest_query] + [len(q) for q in queries])
        if problems:
          rep.violations += 1
      if problems:
        fail = {"method": self.spec, "batch_seed": seed * 1_000_003 + b, "problems": problems[:5],
                "new_tokens": new_tokens, "room": room, "group": group,
                "prompts": [p["id"] for p in prompts],
                "scripts": {str(r): s for r, s in sorted(scripts.items())}}
        if len(rep.failures) < keep_failures:
          rep.failures.append(fail)
        if failures_path:
          with open(failures_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(fail, ensure_ascii=False, default=str) + "\n")
      b += 1
    rep.seconds = time.perf_counter() - t0
    rep.service_calls = sum(int(getattr(s, "calls", 0)) for s in self.services.values())
    return rep

  def _downstream(self, batch, prompts, group) -> tuple[list[str], list[dict]]:
    """Rewards, metrics, step samples, dump and viewer on `batch`: (problems found, the dump's
    records as read back)."""
    from ragjax.rl.rewards import RewardContext, score_rows
    from ragjax.rl.step_context import StepContext
    from ragjax.rl.masks import loss_mask
    from ragjax.rollout.dump import batch_records, read_jsonl, write_jsonl
    from ragjax.rl.step_samples import step_samples
    from ragjax.rollout.viewer import page_html, terminal_text
    problems = []
    rows = batch.meta.rows
    examples = [prompts[r.prompt_index] for r in rows]
    ctxs = [RewardContext(r, ex, 0, self.services) for r, ex in zip(rows, examples)]
    results = score_rows(self.rewards, ctxs, self.reward_kwargs,
                         [str(ex.get("id")) for ex in examples])
    totals = np.asarray([r.total for r in results], np.float32)
    if not np.isfinite(totals).all():
      problems.append(f"non-finite reward totals {totals.tolist()}")
    if self.step_samples:
      step_samples(batch, 8)
    t = batch.traj
    ctx = StepContext(step=0, rollout=batch, examples=examples, rewards=totals,
                      old_logprobs=np.asarray(t.sampler_logprobs),
                      loss_mask=loss_mask(t.labels, tuple(self.c.rl.train_on)),
                      num_prompts=len(prompts), group_size=group, rl=self.c.rl, method_state={})
    for name, fn in self.metrics.items():
      takes_ctx = "ctx" in inspect.signature(fn).parameters
      out = fn(rows, examples, ctx=ctx) if takes_ctx else fn(rows, examples)
      if not all(math.isfinite(float(v)) for v in out.values()):
        problems.append(f"metric {name}: non-finite values {out}")
    recs = batch_records(batch, self.tok, totals, trained=loss_mask(batch.traj.labels))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
      path = f.name
    try:
      write_jsonl(path, recs)
      recs = read_jsonl(path)
    finally:
      os.unlink(path)
    page_html(recs)
    terminal_text(recs)
    return problems, recs


def run(count: int, methods: Sequence = METHODS, seed: int = 0, workdir: Optional[str] = None,
        failures_path: Optional[str] = None, time_limit: float = 0.0, within_config: bool = False,
        log=None) -> list[MethodReport]:
  """Fuzzes each method with `count` outputs; one report per method."""
  workdir = workdir or tempfile.mkdtemp(prefix="ragjax_fuzz_")
  setups, reports = {}, []
  for spec, setup_spec in methods:
    m = Method(spec, setup_spec, workdir, setups)
    rep = m.run(count, seed, failures_path=failures_path, time_limit=time_limit,
                within_config=within_config)
    reports.append(rep)
    if log:
      log(f"{spec}: {rep.outputs} outputs, {rep.crashes} crashes, {rep.violations} "
          f"violations, {rep.seconds:.1f}s")
  return reports


def markdown(reports: Sequence[MethodReport]) -> str:
  """The results table (one row per method) and what did not run."""
  lines = ["| method | protocol | outputs tried | batches | rows | crashes | invariant "
           "violations | rows by stop reason | searches (longest query, chars) | clones | "
           "judge calls | rewards; metrics | s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in reports:
    stops = ", ".join(f"{k} {v}" for k, v in sorted(r.stop_reasons.items()))
    plug = ", ".join(r.rewards) + ("; " + ", ".join(r.metrics) if r.metrics else "")
    lines.append(f"| {r.method} | {r.protocol} | {r.outputs} | {r.batches} | {r.rows} | "
                 f"{r.crashes} | {r.violations} | {stops} | {r.searches} ({r.longest_query}) | "
                 f"{r.clones} | {r.service_calls} | {plug} | {r.seconds:.0f} |")
  by_proto = collections.Counter()
  for r in reports:
    by_proto[r.protocol] += r.outputs
  lines.append("")
  lines.append("Outputs per protocol: " + ", ".join(f"{p} {n}" for p, n in sorted(by_proto.items())))
  kinds = collections.Counter()
  for r in reports:
    kinds.update(r.kinds)
  lines.append("Outputs by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
  skipped = [f"{r.method}: {what} ({why})" for r in reports for what, why in r.skipped.items()]
  lines.append("Not run: " + ("; ".join(skipped) if skipped else "nothing"))
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m ragjax.tools.fuzz", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--count", type=int, default=1000, help="hostile outputs per method")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--methods", nargs="*", help="config specs (default: every method)")
  ap.add_argument("--workdir", help="where the tiny worlds are written (default: a temp dir)")
  ap.add_argument("--failures", help="append every failing batch (with its scripts) here")
  ap.add_argument("--json", help="write the reports as JSON here")
  ap.add_argument("--within-config", action="store_true",
                  help="per-turn budgets and caches no larger than the config's sampler allows")
  args = ap.parse_args(argv)
  if args.count < 1:
    ap.error("--count must be >= 1")
  methods = METHODS
  if args.methods:
    known = dict(METHODS)
    methods = [(m, known.get(m)) for m in args.methods]
  reports = run(args.count, methods, args.seed, args.workdir, args.failures,
                within_config=args.within_config, log=lambda s: print(s, file=sys.stderr, flush=True))
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump([{**vars(r), "stop_reasons": dict(r.stop_reasons), "kinds": dict(r.kinds)}
                 for r in reports], f, indent=1, default=str)
  sys.stdout.write(markdown(reports))
  return 0 if all(r.crashes == 0 and r.violations == 0 for r in reports) else 1


if __name__ == "__main__":
  sys.exit(main())
