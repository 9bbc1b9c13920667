"""`ragjax.tools.fuzz` at CI count: hostile outputs through every method's real pipeline.

The full count (10,000 outputs per method) runs with `python -m ragjax.tools.fuzz --count 10000`
(RELIABILITY.md).  Here: every protocol is reached, nothing crashes or breaks alignment, the
judges and the retriever really run, and the checks catch a broken batch.
"""

import collections
import dataclasses
import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from ragjax.rollout.engine import RolloutEngine  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax import registry  # noqa: E402
from ragjax.rollout.teacher import TeacherPolicy  # noqa: E402
from ragjax.tools import fuzz  # noqa: E402
from ragjax.tools.fuzz_outputs import KINDS, Fuzzer, byte_alphabet  # noqa: E402

CI_COUNT = 60
# The embedded default (configs/world.py:toy) builds a MiniLM index (~10 s on 2 cores); its
# protocol is also configs/rex_rag.py:tiny's, so CI leaves it to the full run.
CI_METHODS = [m for m in fuzz.METHODS if m[0] != "configs/world.py:toy"]


@pytest.fixture(scope="module")
def setups(tmp_path_factory):
  return {"dir": str(tmp_path_factory.mktemp("fuzz")), "setups": {}}


@pytest.fixture(scope="module")
def reports(setups):
  return [fuzz.Method(spec, setup, setups["dir"], setups["setups"]).run(CI_COUNT, seed=0)
          for spec, setup in CI_METHODS]


def test_every_protocol_fuzzed_without_crash_or_misalignment(reports):
  assert {r.protocol for r in reports} == set(registry.names("protocol"))
  kinds = collections.Counter()
  for r in reports:
    assert r.crashes == 0 and r.violations == 0, (r.method, r.failures[:1])
    assert r.outputs >= CI_COUNT and r.rows >= r.batches
    assert sum(r.stop_reasons.values()) == r.rows and "(none)" not in r.stop_reasons
    # the retriever answered some fuzzed queries (the one-turn baselines never search)
    assert r.searches > 0 or r.protocol in ("direct", "retrieve_once"), r.method
    assert r.rewards and not r.skipped, r.method
    kinds.update(r.kinds)
  assert set(kinds) == set(KINDS)          # every kind of hostile output was decoded
  by = {r.method: r for r in reports}
  assert by["configs/r3_rag.py:tiny"].service_calls > 0      # the gold judge scored steps
  assert by["configs/rezero.py:tiny"].service_calls > 0      # the frozen-base judge ran
  table = fuzz.markdown(reports)
  assert table.count("\n| configs/") == len(reports) and "Not run: nothing" in table


def test_checks_catch_a_broken_batch(setups):
  """The invariants can fail: a relabelled token, a lost stop reason, a changed token and a
  dump span that does not re-assemble are each reported."""
  m = fuzz.Method("configs/search_r1.py:tiny", None, setups["dir"], setups["setups"])
  fz = Fuzzer(m.protocol.name, m.tok, m.words)
  rng = random.Random(3)
  pol = fuzz.FuzzPolicy(m.tok, lambda r: fz.row_script(rng, ("valid",)),
                        m.protocol.stop_sequences, (m.tok.eos_token_id,), 64, 2048)
  eng = RolloutEngine(m.protocol, pol, m.setup.retriever, m.tok, m.engine_config)
  batch = eng.run(m.records[:2], samples_per_prompt=2)
  from ragjax.rollout.dump import batch_records
  recs = batch_records(batch, m.tok, trained=loss_mask(batch.traj.labels))
  assert fuzz.check_batch(batch, pol.state.histories, recs) == []
  labels = np.asarray(batch.traj.labels).copy()
  i = int(np.nonzero(labels[0] == Source.POLICY)[0][0])
  labels[0, i] = Source.ENV
  broken = dataclasses.replace(batch, traj=batch.traj.replace(labels=labels))
  assert any("log-prob" in p for p in fuzz.check_batch(broken, pol.state.histories, recs))
  hist = [list(h) for h in pol.state.histories]
  hist[batch.meta.rows[1].sampler_row][-1] += 1
  assert any("history" in p for p in fuzz.check_batch(batch, hist, recs))
  recs[0]["spans"][-1]["ids"].append(7)
  assert any("re-assemble" in p for p in fuzz.check_batch(batch, pol.state.histories, recs))
  batch.meta.rows[0].stop_reason = ""
  assert any("stop reason" in p for p in fuzz.check_batch(batch, pol.state.histories, recs))


def test_invalid_utf8_and_teacher_token_items(setups):
  """Byte tokens really make invalid UTF-8; the teacher emits id items as they are and stops on
  a stop string wherever it falls, as a full decode would."""
  from tokenizers import pre_tokenizers
  assert sorted(byte_alphabet().values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
  m = fuzz.Method("configs/search_r1.py:tiny", None, setups["dir"], setups["setups"])
  fz = Fuzzer(m.protocol.name, m.tok, m.words)
  ids = fz.bad_utf8(random.Random(0))
  assert "\ufffd" in m.tok.decode(ids)
  rng = random.Random(1)
  texts = ["x" * rng.randint(0, 30) + "<search>a b</search>" + "tail é😀" for _ in range(20)]
  texts += ["é😀</sea" + "rch>", "no stop at all", "</answer>"]
  teacher = TeacherPolicy(m.tok, [[t] for t in texts] + [[ids]], m.protocol.stop_sequences,
                          max_new_tokens=500, cache_length=4096)
  state, out = teacher.decode(teacher.prefill([[1]] * (len(texts) + 1)))
  for r, text in enumerate(texts):
    full = m.tok(text, add_special_tokens=False)["input_ids"]
    want = next((n for n in range(1, len(full) + 1)
                 if any(s in m.tok.decode(full[:n]) for s in m.protocol.stop_sequences)),
                len(full))
    assert int(out.lengths[r]) == want, text
  assert out.tokens[len(texts), :len(ids)].tolist() == ids


def test_cli_prints_the_table(setups, capsys):
  rc = fuzz.main(["--count", "20", "--methods", "configs/ur2.py:tiny", "--workdir",
                  os.path.join(setups["dir"], "cli")])
  out = capsys.readouterr().out
  assert rc == 0
  assert "| configs/ur2.py:tiny | ur2 |" in out and "Outputs by kind:" in out
