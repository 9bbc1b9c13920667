"""The qa recipe's cold start: scripted Search-R1 traces of real-format questions through the real
engine and a real BM25 index (kept only where the passages hold the gold answer, labels as an RL
rollout's), and SFT through LoRA adapters (only the adapters learn; the merged params return; a
killed run resumes from its adapter checkpoints)."""

import jax
import numpy as np
import pytest

import _rollout_helpers as h
from _rl_helpers import tiny_cfg, tiny_params
from ragjax.models.lora import LoraAdapter, LoraConfig
from ragjax.rl.search_traces import (ANSWER_THINK, NOT_FOUND, SEARCH_THINK, answer_sentence,
                                      bridge_title, grammar, search_script, search_traces)
from ragjax.rl.sft import SFTConfig, run_sft
from ragjax.rollout.labels import Source

RECORDS = [
    {"id": "a", "question": "Who founded the Quillport Observatory?",
     "golden_answers": ["Mirela Dunst"]},
    {"id": "b", "question": "Which sea borders Zorbland?", "golden_answers": ["Glass Sea"]},
    {"id": "c", "question": "What is the capital of Zorbland " + "and its harbour " * 40 + "?",
     "golden_answers": ["Quillport"]},
    {"id": "d", "question": "Where does the   Tessaly River flow?",
     "golden_answers": ["the Amber Sea", "Amber Sea"]},
]


def engine():
  return h.search_r1_teacher_engine()


def test_search_script_is_the_question_then_the_first_gold_answer():
  assert search_script(RECORDS[3]) == [
      f"{SEARCH_THINK}<search> Where does the Tessaly River flow? </search>",
      "<think> The documents say the answer is the Amber Sea. </think>\n"
      "<answer> the Amber Sea </answer>"]
  with pytest.raises(ValueError, match="question 'x' has no gold answer"):
    search_script({"id": "x", "question": "q?", "golden_answers": [" "]})


@pytest.mark.parametrize("require", [True, False])
def test_traces_keep_those_whose_passages_hold_the_answer(require):
  e = engine()
  rows_t, rows_l, stats = search_traces(e, RECORDS, max_new_tokens=48, cache_length=2048,
                                        require_retrieved=require)
  # c's search turn is longer than 48 tokens; b's passage (the Amber Sea) is not its answer
  assert stats == {"questions": 4, "too_long": 1, "retrieved": 2, "kept": 2 if require else 3}
  texts = [e.tokenizer.decode(t) for t in rows_t]
  assert "Mirela Dunst founded" in texts[0] and "<answer> Mirela Dunst </answer>" in texts[0]
  assert ("<answer> Glass Sea </answer>" in " ".join(texts)) == (not require)
  for t, lab in zip(rows_t, rows_l):
    policy = e.tokenizer.decode(t[lab == Source.POLICY])
    retrieved = e.tokenizer.decode(t[lab == Source.RETRIEVED])
    # the policy tokens are exactly the script's turns; the passages are not trained on
    assert policy.startswith(SEARCH_THINK + "<search> ")
    assert ANSWER_THINK.split("{")[0] in policy
    assert "Doc 1" not in policy and "(Title:" in retrieved


def test_sft_through_lora_trains_only_the_adapters_and_returns_merged_params(tmp_path):
  cfg = tiny_cfg()
  rng = np.random.default_rng(0)
  rows_t = [rng.integers(1, cfg.vocab_size, 12).astype(np.int32) for _ in range(8)]
  rows_l = [np.asarray([Source.PROMPT] * 4 + [Source.POLICY] * 8, np.int32) for _ in range(8)]
  adapter = LoraAdapter(LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "down_proj")))
  base = tiny_params()
  sft = SFTConfig(steps=12, batch_size=8, lr=3e-2, warmup_steps=0, log_every=1)
  got, hist = run_sft(cfg, tiny_params(), rows_t, rows_l, sft, (16,), seed=0, progress=False,
                      log_path=str(tmp_path / "sft.jsonl"), adapter=adapter)
  assert hist[-1]["loss"] < hist[0]["loss"] - 0.1
  flat_base = {"/".join(map(str, k)): v for k, v in
               jax.tree_util.tree_flatten_with_path(base)[0]}
  flat_got = {"/".join(map(str, k)): v for k, v in jax.tree_util.tree_flatten_with_path(got)[0]}
  assert flat_base.keys() == flat_got.keys()
  changed = {k for k in flat_base if not np.array_equal(flat_base[k], flat_got[k])}
  assert changed and all("q_proj" in k or "down_proj" in k for k in changed), changed


def test_killed_lora_sft_resumes_to_the_uninterrupted_params(tmp_path, monkeypatch):
  """The cold start's SFT checkpoints hold only the adapters' state; a killed run resumes from
  them to the params an uninterrupted run returns."""
  import ragjax.rl.sft as sft_module
  cfg = tiny_cfg()
  rng = np.random.default_rng(1)
  rows_t = [rng.integers(1, cfg.vocab_size, 12).astype(np.int32) for _ in range(8)]
  rows_l = [np.asarray([Source.PROMPT] * 4 + [Source.POLICY] * 8, np.int32) for _ in range(8)]
  adapter = LoraAdapter(LoraConfig(rank=4, alpha=8.0))
  sft = SFTConfig(steps=5, batch_size=4, lr=1e-2, warmup_steps=0, log_every=1, save_every=2)
  kw = dict(seed=0, progress=False, adapter=adapter, fingerprint={"sft.lr": sft.lr})
  want, _ = run_sft(cfg, tiny_params(), rows_t, rows_l, sft, (16,),
                    log_path=str(tmp_path / "a.jsonl"), **kw)
  real, calls = sft_module.make_sft_batch, {"n": 0}

  def dies_at_step_4(*a, **k):
    calls["n"] += 1
    if calls["n"] == 4:
      raise KeyboardInterrupt
    return real(*a, **k)

  monkeypatch.setattr(sft_module, "make_sft_batch", dies_at_step_4)
  ckpt, log_b = str(tmp_path / "sft"), str(tmp_path / "b.jsonl")
  with pytest.raises(KeyboardInterrupt):
    run_sft(cfg, tiny_params(), rows_t, rows_l, sft, (16,), log_path=log_b, ckpt_dir=ckpt, **kw)
  resumed = []
  monkeypatch.setattr(sft_module, "make_sft_batch",
                      lambda *a, **k: resumed.append(1) or real(*a, **k))
  got, hist = run_sft(cfg, tiny_params(), rows_t, rows_l, sft, (16,), log_path=log_b,
                      ckpt_dir=ckpt, **kw)
  assert len(resumed) == 3            # steps 3-5: it went on from the step-2 checkpoint
  assert [r["step"] for r in hist] == [1, 2, 3, 4, 5]
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=0)


BRIDGE = {"id": "e", "question": "What does the observatory founded by Mirela Dunst study?",
          "golden_answers": ["comets and tides"],
          "metadata": {"supporting_facts": [["Mirela Dunst", 0], ["Quillport Observatory", 0]],
                       "context": [
                           ["Amber Sea", ["Sailors there watch comets and tides."]],  # no support
                           ["Mirela Dunst", ["Mirela Dunst founded the Quillport Observatory."]],
                           ["Quillport Observatory", ["It studies comets and tides."]]]}}


def test_bridge_title_is_the_unretrieved_supporting_passage_that_holds_the_answer():
  assert bridge_title(BRIDGE, {"Mirela Dunst"}) == "Quillport Observatory"
  assert bridge_title(BRIDGE, {"Quillport Observatory"}) == ""      # already retrieved
  assert bridge_title(RECORDS[0], set()) == ""                     # no supporting facts
  assert search_script(BRIDGE, "fixed", "Quillport Observatory") == [
      f"{SEARCH_THINK}<search> What does the observatory founded by Mirela Dunst study? </search>",
      "<think> The documents do not give the answer. I need to search for Quillport "
      "Observatory. </think>\n<search> Quillport Observatory </search>",
      "<think> The documents give the answer. </think>\n<answer> comets and tides </answer>"]
  with pytest.raises(ValueError, match="traces.answer_think 'x'"):
    search_script(BRIDGE, "x")


def test_second_search_scripts_the_bridge_when_the_first_passages_miss_the_answer():
  e = h.search_r1_teacher_engine(max_turns=3)
  records = [BRIDGE, RECORDS[0]]
  _, _, one = search_traces(e, records, max_new_tokens=128, cache_length=2048)
  assert one == {"questions": 2, "too_long": 0, "retrieved": 1, "kept": 1}
  rows_t, rows_l, two = search_traces(e, records, max_new_tokens=128, cache_length=2048,
                                      second_search=True)
  assert two == {"questions": 2, "too_long": 0, "second_search": 1, "retrieved": 2, "kept": 2,
                 "two_searches": 1}
  policy = e.tokenizer.decode(rows_t[0][rows_l[0] == Source.POLICY])
  retrieved = e.tokenizer.decode(rows_t[0][rows_l[0] == Source.RETRIEVED])
  assert policy.count("<search>") == 2 and "<search> Quillport Observatory </search>" in policy
  assert "Mirela Dunst founded" in retrieved and "studies comets and tides" in retrieved
  # a cache too short for the second search's passages: that trace never reaches its answer
  # and is not kept; the one-search trace still is
  rows_t2, _, short = search_traces(e, records, max_new_tokens=128,
                                    cache_length=len(rows_t[0]) - 4, second_search=True)
  assert short["kept"] == 1 and short["two_searches"] == 0
  assert "Mirela Dunst" in e.tokenizer.decode(rows_t2[0])


# --- AutoRefine's protocol: the answer turn opens with a <refine> block -----------------------
DOCS = ('Doc 1(Title: "Zorbland (island)") Zorbland is an island. Its capital is Quillport, '
        'a harbour.\n'
        'Doc 2(Title: "Amber Sea") The Amber Sea borders Zorbland to the south.')


def test_answer_sentence_is_the_documents_sentence_that_holds_the_answer():
  assert answer_sentence(DOCS, "Quillport") == "Its capital is Quillport, a harbour."
  assert answer_sentence(DOCS, "an island") == "Zorbland is an island."   # not the title
  assert answer_sentence(DOCS, "the amber sea") == "The Amber Sea borders Zorbland to the south."
  # whole words only ("Zorb" is not "Zorbland"); no sentence: "not found"
  assert answer_sentence(DOCS, "Zorb") == NOT_FOUND == "not found"
  # a long sentence: the max_words words around the answer's first mention
  long = 'Doc 1(Title: "X") ' + " ".join(f"w{i}" for i in range(30)) + " Quillport w30 w31."
  assert answer_sentence(long, "Quillport", max_words=6) == "w27 w28 w29 Quillport w30 w31."
  assert answer_sentence(long, "w1", max_words=4) == "w0 w1 w2 w3"


def test_the_grammar_follows_the_protocol():
  from ragjax.rollout.protocols import get_protocol
  assert grammar(get_protocol("search_r1")) == grammar("rezero") == "search"
  assert grammar(get_protocol("autorefine")) == "refine"
  assert grammar(get_protocol("autorefine", refine=False)) == "search"   # the ablation
  with pytest.raises(ValueError, match="no scripted cold start for protocol 'r3_rag'"):
    grammar("r3_rag")


@pytest.mark.parametrize("require", [True, False])
def test_refine_traces_quote_the_sentence_the_engine_retrieved(require):
  from ragjax.rollout.engine import RolloutEngine
  from ragjax.rollout.protocols import get_protocol
  e = engine()
  e = RolloutEngine(get_protocol("autorefine", top_k=1, max_turns=2), e.sampler, e.retriever,
                    e.tokenizer)
  rows_t, rows_l, stats = search_traces(e, RECORDS, max_new_tokens=64, cache_length=2048,
                                        require_retrieved=require)
  assert stats == {"questions": 4, "too_long": 1, "retrieved": 2, "kept": 2 if require else 3}
  policy = [e.tokenizer.decode(t[lab == Source.POLICY]) for t, lab in zip(rows_t, rows_l)]
  assert policy[0] == (
      f"{SEARCH_THINK}<search> Who founded the Quillport Observatory? </search>"
      "<refine> Mirela Dunst founded the Quillport Observatory in 1871. </refine>\n"
      "<answer> Mirela Dunst </answer>")
  assert policy[-1] == (
      f"{SEARCH_THINK}<search> Where does the Tessaly River flow? </search>"
      "<refine> The Tessaly River flows through Quillport into the Amber Sea. </refine>\n"
      "<answer> the Amber Sea </answer>")
  if not require:   # b's passage does not hold its answer: the refine block says so
    assert "<refine> not found </refine>\n<answer> Glass Sea </answer>" in policy[1]
  text = e.tokenizer.decode(rows_t[0])
  assert "<documents>" in text and "</documents>" in text
  # a refine turn over max_new_tokens (a's: 56 tokens, its search turn 44) is dropped after
  # it ran (its answer was cut)
  _, _, short = search_traces(e, RECORDS[:1], max_new_tokens=50, cache_length=2048)
  assert short == {"questions": 1, "too_long": 1, "retrieved": 1, "kept": 0}
