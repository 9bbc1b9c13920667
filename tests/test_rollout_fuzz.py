"""Fuzzed policy outputs, counted (issue 26): for every protocol, `--fuzz-count` generated turns
(default 150 in CI; `python -m pytest tests/test_rollout_fuzz.py --fuzz-count=10000 -s` is the
full run) go through the real rollout engine as a scripted policy's output, then through every
registered reward, every metric that reads rows, the trajectory dump and both viewer renderings.

The turns are hostile on purpose (`ragjax.tools.fuzz_outputs`, the generator
`python -m ragjax.tools.fuzz` also uses): unclosed, nested, repeated and mis-cased tags; the
other protocols' grammars; tags split across turns; empty and 10,000-character queries; raw
byte-level token ids that are not valid UTF-8; a bare end-of-turn token; control characters.
This test is the cross product (every registered reward and metric on every protocol's rows,
with a scripted judge); `tests/test_tools_fuzz.py` runs each method config's own pipeline with
its real judges.
Asserted: no stage raises; every row ends with a stop reason; labels, masks, turns and
log-probs line up with the tokens (`check_alignment`); retrieved and environment tokens are
never trained; the viewer escapes every span.  The figures line (`FUZZ ...`) is what
RELIABILITY.md records.  The rewards' judge is a `ScriptedChat` answering junk (a test double
behind the `ChatModel` interface: the judge's own parsing is fuzzed here too).
"""

import collections
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402
from test_services_fixtures import ScriptedChat  # noqa: E402

from ragjax import registry  # noqa: E402
import ragjax.rl.rewards  # noqa: E402,F401  (registers the rewards and metrics)
from ragjax.rl.rewards.context import RewardContext, score_rows  # noqa: E402
from ragjax.rollout.dump import batch_records  # noqa: E402
from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax import registry  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.renderer import Renderer  # noqa: E402
from ragjax.rollout.viewer import page_html, terminal_text  # noqa: E402
from ragjax.tools.fuzz_outputs import Fuzzer  # noqa: E402

WORDS = ["Tessaly River", "Amber Sea", "Mirela Dunst", "chronicle harbour event", "1912", "B",
         "yes", "<script>alert(1)</script>"]
# Metrics that read the trainer's state rather than the rows' text (covered elsewhere).
STATE_METRICS = {"rex_rag": "reads the trainer's method state (tests/test_rl_rex_rag.py)"}
EXAMPLE = {"id": "q0", "question": "Where is Quillport?", "golden_answers": ["Tessaly River", "B"],
           "chunk_content": "Quillport lies on the Tessaly River.",
           "metadata": {"qtype": "1hop", "task": "qa", "gold_ids": ["p1"], "options": ["A", "B"]}}
# A method's own rewards and metrics read its protocol's fields (and refuse another protocol's
# rows with an error naming the protocol to use): each runs on its protocol's rollouts; the
# generic ones (EM, F1, format, ...) run on every protocol's.
METHODS = ("rezero", "ur2", "r3_rag", "autorefine")
OWNERS = {"refine_cover_em": "autorefine"}


def method_of(name: str):
  return OWNERS.get(name) or next((m for m in METHODS if name == m or name.startswith(m + "_")),
                                  None)


def pytest_generate_tests(metafunc):
  if "protocol_name" in metafunc.fixturenames:
    metafunc.parametrize("protocol_name", registry.names("protocol"))


def scripts_for(rng, fuzzer: Fuzzer, rows: int) -> dict:
  """Each row's turns: hostile outputs of `ragjax.tools.fuzz_outputs` (the one generator)."""
  return {r: fuzzer.row_script(rng)[0] for r in range(rows)}


def builtin(category: str) -> list:
  """The plug-ins ragjax ships (other tests register their own doubles in the same process)."""
  return [n for n in registry.names(category)
          if getattr(registry.lookup(category, n), "__module__", "").startswith("ragjax.")]


def reward_calls(protocol: str):
  """(reward, kwargs) pairs: every built-in reward this protocol's rows can be scored by,
  UR²'s per task."""
  calls = []
  for name in builtin("reward"):
    if method_of(name) not in (None, protocol):
      continue
    if name in ("ur2_answer", "ur2_format"):
      calls += [(name, {"task": t}) for t in ("qa", "mcq", "math")]
    else:
      calls.append((name, {}))
  return calls


def test_fuzzed_outputs_never_crash_and_stay_aligned(protocol_name, request):
  count = int(request.config.getoption("--fuzz-count"))
  rng = np.random.default_rng(sum(map(ord, protocol_name)))
  pyrng = random.Random(sum(map(ord, protocol_name)))
  judge = ScriptedChat(lambda m: WORDS[len(str(m)) % len(WORDS)] + " Relevance: x <answer>")
  emitted, rollouts, reasons, reward_values = 0, 0, collections.Counter(), 0
  failures = []
  while emitted < count:
    overrides = {"max_turns": int(rng.integers(1, 5))}
    if protocol_name == "rezero":
      overrides["today"] = "01 Jan 2026"
    proto = get_protocol(protocol_name, **overrides)
    chat = bool(rng.integers(2))
    tok = h.tokenizer(chat)
    rows = int(rng.integers(1, 5))
    scripts = scripts_for(pyrng, Fuzzer(protocol_name, tok, WORDS), rows)
    prompt_len = len(Renderer(proto, tok).prompt_ids(EXAMPLE["question"]))
    room = int(rng.choice([24, 200, 3000]))
    pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences,
                           max_new_tokens=int(rng.choice([8, 64, 256])),
                           cache_length=prompt_len + room)
    eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok, EngineConfig(chat=chat))
    try:
      batch = eng.run([EXAMPLE["question"]], samples_per_prompt=rows, seed=rollouts)
    except Exception as e:  # noqa: BLE001  (counted and reported, then the test fails)
      failures.append(("engine", repr(e)[-600:], scripts))
      continue
    rollouts += 1
    emitted += int(sum(min(c, len(scripts[r])) for r, c in enumerate(pol.state.cursor)))
    h.check_alignment(batch)
    labels, mask = np.asarray(batch.traj.labels), loss_mask(batch.traj.labels, ("policy",))
    assert not mask[(labels == Source.RETRIEVED) | (labels == Source.ENV)].any()
    metas = batch.meta.rows
    for m in metas:
      assert isinstance(m.stop_reason, str) and m.stop_reason, m
      reasons[m.stop_reason] += 1
    ctxs = [RewardContext(row=m, example=EXAMPLE, step=1, services={"judge": judge})
            for m in metas]
    for name, kw in reward_calls(protocol_name):
      try:
        results = score_rows({name: 1.0}, ctxs, {name: kw})
        assert all(np.isfinite(r.total) for r in results), (name, results)
        reward_values += len(results)
      except Exception as e:  # noqa: BLE001
        failures.append((f"reward {name} {kw}", repr(e)[-600:], scripts))
    for name in builtin("metric"):
      if name in STATE_METRICS or method_of(name) not in (None, protocol_name):
        continue
      try:
        out = registry.lookup("metric", name)(metas, [EXAMPLE] * len(metas))
        assert all(np.isfinite(float(v)) for v in out.values()), (name, out)
      except Exception as e:  # noqa: BLE001
        failures.append((f"metric {name}", repr(e)[-600:], scripts))
    try:
      records = batch_records(batch, tok, trained=loss_mask(batch.traj.labels))
      page = page_html(records)
      terminal_text(records)
      assert "<script>alert" not in page
    except Exception as e:  # noqa: BLE001
      failures.append(("viewer", repr(e)[-600:], scripts))
  print(f"\nFUZZ protocol={protocol_name} outputs={emitted} rollouts={rollouts} "
        f"rows={sum(reasons.values())} reward_calls={reward_values} crashes={len(failures)} "
        f"stop_reasons={dict(sorted(reasons.items()))}")
  for stage, err, _ in failures[:5]:
    print(f"FUZZ FAILURE {stage}: {err}")
  assert not failures, ([(stage, err) for stage, err, _ in failures[:5]],
                        "first failing scripts:", failures[0][2] if failures else None)
