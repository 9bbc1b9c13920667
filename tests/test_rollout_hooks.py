"""Mid-rollout row edits: REX-RAG clones (cache, group, labels, sampler state) and edit errors."""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.rollout.engine import EngineConfig, RolloutEngine, spare_prompts  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols import get_protocol  # noqa: E402
from ragjax.rollout.rex_rag import ABLATION_FIVE, EXPLORATION_PROMPTS, RexRagCloneHook, pool  # noqa: E402

Q = "What is the capital of Zorbland"
GOLD = {0: "quillport"}


def wrong(group_id, answer):
  return answer.strip().lower() != GOLD[group_id]


def run_rex(p=1.0, spare=2, g=2, seed=0, hook=None, prompts=(Q,),
            clone_script="</think> <search> Tessaly River </search>"):
  """Row 0 answers wrong, row 1 right; row 2 (row 0's clone) writes `clone_script` after the
  probe, then answers right."""
  tok = h.tokenizer()
  proto = get_protocol("rex_rag")
  scripts = {0: ["<think> guess </think> <answer> Paris </answer>"],
             1: ["<think> sure </think> <answer> Quillport </answer>"],
             2: [clone_script, "<answer> Quillport </answer>"]}
  pol = h.ScriptedPolicy(tok, scripts, stop_strings=proto.stop_sequences)
  ret = h.CountingRetriever(h.bm25_retriever())
  hook = hook or RexRagCloneHook(is_wrong=wrong, p=p, prompts=pool([0]), seed=3)
  eng = RolloutEngine(proto, pol, ret, tok, EngineConfig(spare_rows=spare), hooks=[hook])
  return eng.run(list(prompts), samples_per_prompt=g, seed=seed), pol, ret, eng, tok, hook


def test_pool_is_the_papers():
  assert len(EXPLORATION_PROMPTS) == 30 and len(set(EXPLORATION_PROMPTS)) == 30
  assert all(p.startswith("<think> ") and "</think>" not in p for p in EXPLORATION_PROMPTS)
  assert pool(ABLATION_FIVE)[1] == EXPLORATION_PROMPTS[11]


def test_rex_rag_clone_joins_group_drops_answer_and_trains_on_probe():
  batch, pol, ret, eng, tok, hook = run_rex()
  h.check_alignment(batch)
  m = batch.meta
  assert len(m) == 3
  assert [r.clone_of for r in m.rows] == [None, None, 0]
  assert list(batch.traj.group_id) == [0, 0, 0]
  assert m.stop_reasons == ["answer", "answer", "answer"]
  assert m.answers == ["Paris", "Quillport", "Quillport"]
  assert hook.inserted == {2: 0}
  t = batch.traj
  k = int(t.lengths[2])
  labels, ids, turn = t.labels[2, :k], t.tokens[2, :k].tolist(), t.turn[2, :k]
  p = int(t.prompt_lengths[2])
  assert ids[:p] == t.tokens[0, :p].tolist()            # same prompt as its source
  runs = []
  j = p
  while j < k:
    e = j
    while e < k and labels[e] == labels[j] and turn[e] == turn[j]:
      e += 1
    runs.append((tok.decode(ids[j:e]), Source(labels[j]).name, int(turn[j])))
    j = e
  # the space before <answer> is part of the " <" token, so the cut lands before it
  assert runs[0] == ("<think> guess </think>", "POLICY", 0)
  assert runs[1] == (EXPLORATION_PROMPTS[0], "INJECTED", 0)
  assert runs[2] == ("</think> <search> Tessaly River </search>", "POLICY", 1)
  assert [r[1] for r in runs[3:6]] == ["ENV", "RETRIEVED", "ENV"]
  assert runs[6] == ("<answer> Quillport </answer>", "POLICY", 2)
  # injected probe tokens are trained on only when configured; the source row is untouched
  inj = labels == Source.INJECTED
  assert inj.sum() > 0 and (loss_mask(t.labels, ("policy", "injected"))[2, :k][inj] == 1).all()
  assert "<answer> Paris </answer>" in tok.decode(t.tokens[0, :int(t.lengths[0])].tolist())
  # the clone's sampler row holds exactly its trajectory; its policy log-probs sit at its slots
  assert pol.state.histories[m.rows[2].sampler_row] == ids
  pos = np.nonzero(labels == Source.POLICY)[0]
  np.testing.assert_allclose(t.sampler_logprobs[2, pos], [h.slot_logprob(j) for j in pos])
  assert pol.calls["clone_rows"] == 1 and pol.calls["truncate"] == 1
  assert ret.calls == [(["Tessaly River"], 3)]


def test_search_probe_opens_the_clones_search():
  """The probe `<search>` (pool "search"): the policy writes only the query and `</search>`
  after it, and the turn is parsed with the probe, so the clone's query is served."""
  hook = RexRagCloneHook(is_wrong=wrong, p=1.0, prompts=("<search>",), seed=3)
  batch, pol, ret, eng, tok, hook = run_rex(hook=hook, clone_script=" Tessaly River </search>")
  h.check_alignment(batch)
  clone = batch.meta.rows[2]
  assert clone.clone_of == 0 and clone.answer == "Quillport"
  assert ret.calls == [(["Tessaly River"], 3)]
  assert [(t.action, t.query) for t in clone.turns][-2:] == [("search", "Tessaly River"),
                                                             ("answer", None)]
  assert clone.num_searches == 1 and clone.turns[-2].doc_ids
  t = batch.traj
  k = int(t.lengths[2])
  text = tok.decode(t.tokens[2, int(t.prompt_lengths[2]):k].tolist())
  assert "<search> Tessaly River </search>" in text and "Paris" not in text


def test_rex_rag_default_mask_and_no_clone_when_p_zero():
  batch, *_ = run_rex()
  inj = batch.traj.labels == Source.INJECTED
  assert inj.any() and not loss_mask(batch.traj.labels)[inj].any()
  batch, pol, *_ = run_rex(p=0.0)
  assert len(batch.meta) == 2 and pol.calls["clone_rows"] == 0


def test_clone_without_spare_rows_is_skipped_and_counted():
  """The REX-RAG hook never crashes the rollout for want of spare rows: the clone is skipped
  and counted; a hook that clones without a spare row left still gets a clear error."""
  batch, pol, *_ = run_rex(spare=0)
  assert len(batch.meta) == 2 and pol.calls["clone_rows"] == 0
  assert batch.stats == {"rex_rag_clone/eligible": 1, "rex_rag_clone/overflow": 1}
  batch, *_ = run_rex(spare=2)
  assert batch.stats == {"rex_rag_clone/eligible": 1, "rex_rag_clone/made": 1}

  def greedy_cloner(views, editor):
    for v in views:
      editor.clone(v.row)
  tok = h.tokenizer()
  proto = get_protocol("rex_rag")
  pol = h.ScriptedPolicy(tok, {0: ["<answer> a </answer>"]}, stop_strings=proto.stop_sequences)
  eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok, hooks=[greedy_cloner])
  with pytest.raises(RuntimeError, match="spare_rows"):
    eng.run([Q])


def test_spare_rows_sized_from_p_and_the_row_count():
  hook = RexRagCloneHook(is_wrong=wrong, p=20 / 101, prompts=pool([0]))
  # 2560 rows: mean 506.9, sd 20.2 -> ceil(506.9 + 80.7) = 588; never more rows than there are
  assert hook.spare_rows(2560) == 588
  assert RexRagCloneHook(p=1.0).spare_rows(20) == 20 and RexRagCloneHook(p=0.0).spare_rows(20) == 0
  tok, proto = h.tokenizer(), get_protocol("rex_rag")
  pol = h.ScriptedPolicy(tok, {}, stop_strings=proto.stop_sequences)
  eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok, EngineConfig(spare_rows=-1),
                      hooks=[hook])
  assert eng.spare_rows(16) == math.ceil(16 * 20 / 101 + 4 * math.sqrt(16 * 20 / 101 * 81 / 101))
  eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok, EngineConfig(spare_rows=-1))
  assert eng.spare_rows(16) == 0
  batch, pol, *_ = run_rex(spare=-1, hook=RexRagCloneHook(is_wrong=wrong, p=1.0,
                                                          prompts=pool([0])))
  assert len(batch.meta) == 3 and pol.calls["clone_rows"] == 1


def test_clones_do_not_depend_on_the_waves():
  """Each row's clone draw is seeded by its place in the whole batch, so rolling the batch out
  in waves (EngineConfig.wave_rows, spare rows sized per wave) clones the same rows with the
  same prompts as one big wave."""
  tok, proto = h.tokenizer(), get_protocol("rex_rag")
  hook = RexRagCloneHook(is_wrong=lambda g, a: True, p=0.5, prompts=EXPLORATION_PROMPTS, seed=3)

  def clones(wave_rows):
    pol = h.ScriptedPolicy(tok, {r: ["<think> guess </think> <answer> Paris </answer>"]
                                 for r in range(64)}, stop_strings=proto.stop_sequences)
    eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok,
                        EngineConfig(spare_rows=-1, wave_rows=wave_rows), hooks=[hook])
    batch = eng.run([Q] * 6, samples_per_prompt=2, seed=5)
    rows = batch.meta.rows
    return sorted((rows[r.clone_of].prompt_index, rows[r.clone_of].sample_index, r.response_text)
                  for r in rows if r.clone_of is not None), batch.stats
  whole, stats = clones(0)
  waves, wave_stats = clones(4)
  assert whole == waves and 0 < len(whole) < 12
  assert stats == wave_stats and stats["rex_rag_clone/eligible"] == 12


def test_spare_prompts_keep_the_sampler_rows_sharded():
  # the paper's step: 512 x 5 rows, 588 spare -> 118 prompt copies (3150 rows); on 8 batch
  # devices 120 copies, so 3160 rows split evenly
  assert spare_prompts(512, 5, 588) == 118 and spare_prompts(512, 5, 588, 8) == 120
  assert spare_prompts(4, 4, 0, 8) == 0 and spare_prompts(4, 4, 1, 3) == 2   # (4 + 2) x 4 = 24


def test_clone_draws_depend_on_the_run_seed_only():
  """Same run seed -> same clones and prompts, whatever ran before on the hook (resume)."""
  hook = RexRagCloneHook(is_wrong=lambda g, a: True, p=0.5, prompts=EXPLORATION_PROMPTS, seed=3)

  def clones(seed):
    batch, *_ = run_rex(g=8, seed=seed, hook=hook, prompts=(Q, Q))
    return [(r.clone_of, r.response_text) for r in batch.meta.rows if r.clone_of is not None]
  first = clones(11)
  clones(12)
  assert clones(11) == first and 0 < len(first) < 16
  assert clones(12) != first


def test_deleting_a_span_inside_the_turn_is_refused():
  tok = h.tokenizer()
  proto = get_protocol("search_r1")

  def hook(views, editor):
    for v in views:
      if v.turn == 0:
        editor.delete_span(v.row, 0, 3)

  pol = h.ScriptedPolicy(tok, {0: ["<answer> a </answer>"]}, stop_strings=proto.stop_sequences)
  eng = RolloutEngine(proto, pol, h.bm25_retriever(), tok, hooks=[hook])
  with pytest.raises(ValueError, match="only a span that ends the last turn"):
    eng.run([Q])
