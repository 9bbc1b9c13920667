"""Properties of the synthetic search world (the embedded default's task)."""

import dataclasses
import filecmp
import glob
import os
import random
import re

import numpy as np
import pytest

from ragjax.data.world import (QTYPES, WorldConfig, contains_words, generate_world, norm_words,
                               write_flashrag)

SMALL = WorldConfig(num_people=30, num_places=10, num_orgs=8, num_works=15, retry_groups=6,
                    num_train=120, num_dev=20, num_test=40)


@pytest.fixture(scope="module")
def world():
  return generate_world()  # the default the embedded run uses


def _passages(world):
  return {p["id"]: p for p in world.passages}


def _all_questions(world):
  return [e for split in ("train", "dev", "test") for e in world.questions[split]]


def test_sizes_types_and_lengths(world):
  cfg = world.config
  weights = dict(cfg.qtype_weights)
  for split in ("train", "dev", "test"):
    exs = world.questions[split]
    assert len(exs) == getattr(cfg, f"num_{split}")
    counts = {q: sum(e.metadata["qtype"] == q for e in exs) for q in QTYPES}
    for q in QTYPES:  # largest-remainder rounding: within one of the exact share
      assert abs(counts[q] - len(exs) * weights[q]) <= 1, (split, counts)
    assert len({e.id for e in exs}) == len(exs)
    assert len({e.question for e in exs}) == len(exs)
  words = [len(p["text"].split()) for p in world.passages]
  assert min(words) >= 20 and max(words) <= 60
  for p in world.passages:
    assert p["contents"] == f'"{p["title"]}"\n{p["text"]}'
  assert len({p["id"] for p in world.passages}) == len(world.passages)


def test_every_hop_is_answered_by_its_passage(world):
  ps = _passages(world)
  for e in _all_questions(world):
    hops = e.metadata["hops"]
    assert hops and e.metadata["num_hops"] == len(hops)
    assert list(e.supporting_ids) == list(dict.fromkeys(p for h in hops for p in h["passage_ids"]))
    for h in hops:
      for pid in h["passage_ids"]:
        words = norm_words(ps[pid]["contents"])
        assert contains_words(words, norm_words(h["answer"])), (e.question, h, ps[pid]["text"])
    if e.metadata["qtype"] in ("1hop", "retry", "2hop"):
      assert hops[-1]["answer"] == e.golden_answers[0]


def test_two_hop_questions_need_two_distinct_passages(world):
  ps = _passages(world)
  words_of = {split: [norm_words(p["contents"]) for p in world.corpus(split)] for split in ("train", "test")}
  two_hop = [e for e in _all_questions(world) if e.metadata["qtype"] == "2hop"]
  assert len(two_hop) >= 100
  for e in two_hop:
    hops = e.metadata["hops"]
    assert len(hops) >= 2
    pids = [h["passage_ids"][0] for h in hops]
    assert len(set(pids)) == len(pids), e.question
    # The question names the first hop's subject; no single passage of its world holds that
    # name together with the final answer, so one retrieval cannot answer it.
    topic = norm_words(ps[pids[0]]["title"])
    final = norm_words(e.golden_answers[0])
    assert contains_words(norm_words(e.question), topic)
    wi = e.metadata["world"]
    for words in words_of["test" if wi else "train"]:
      assert not (contains_words(words, topic) and contains_words(words, final)), (e.question, words)
    # The bridge entity (hop 1's answer) is never named in the question.
    assert not contains_words(norm_words(e.question), norm_words(hops[0]["answer"]))


def test_comparisons_need_both_entities(world):
  comps = [e for e in _all_questions(world) if e.metadata["qtype"] == "comparison"]
  assert {e.golden_answers[0] for e in comps} == {"yes", "no"}
  yes = sum(e.golden_answers[0] == "yes" for e in comps) / len(comps)
  assert 0.3 < yes < 0.7
  for e in comps:
    h1, h2 = e.metadata["hops"]
    assert h1["passage_ids"] != h2["passage_ids"]
    same = h1["answer"] == h2["answer"]
    if e.metadata["comparison"].startswith("same"):
      assert (e.golden_answers[0] == "yes") == same
    else:
      assert (e.golden_answers[0] == "yes") == (int(h1["answer"]) < int(h2["answer"]))


def test_no_answer_string_appears_in_its_question(world):
  for e in _all_questions(world):
    q = norm_words(e.question)
    for a in e.golden_answers:
      assert not contains_words(q, norm_words(a)), (e.question, a)
      assert a.lower() not in e.question.lower() or len(a) <= 3, (e.question, a)


def test_test_world_entities_are_disjoint_from_train(world):
  train_names = world.entity_names(0)
  test_names = world.entity_names(1)
  assert len(test_names) > 100
  assert not set(train_names) & set(test_names)
  train_words = {w for n in train_names for w in n.split()} - {"Company", "Guild", "Bank", "School", "Club", "Press"}
  test_words = {w for n in test_names for w in n.split()} - {"Company", "Guild", "Bank", "School", "Club", "Press"}
  assert not train_words & test_words
  train_corpus = {p["id"] for p in world.corpus("train")}
  test_corpus = {p["id"] for p in world.corpus("test")}
  assert not train_corpus & test_corpus and len(train_corpus) + len(test_corpus) == len(world.passages)
  lower_train = {w.lower() for w in train_words}
  for e in world.questions["test"]:
    assert set(e.supporting_ids) <= test_corpus
    assert not set(norm_words(e.question)) & lower_train, e.question
  for e in world.questions["train"] + world.questions["dev"]:
    assert set(e.supporting_ids) <= train_corpus
  # Train and dev share a world but not questions about the same facts.
  keys = lambda exs: {tuple((h["entity"], h["relation"]) for h in e.metadata["hops"]) for e in exs}
  assert not keys(world.questions["train"]) & keys(world.questions["dev"])


def test_retry_questions_obvious_query_misses_refined_query_hits(world):
  """Namesakes make the first query land on a decoy; the refined query finds the target.
  Measured with a real BM25 index over the split's own corpus, top-3."""
  import bm25s
  for split in ("train", "test"):
    corpus = world.corpus(split)
    ids = [p["id"] for p in corpus]
    index = bm25s.BM25()
    index.index(bm25s.tokenize([p["contents"] for p in corpus], show_progress=False), show_progress=False)
    retry = [e for e in world.questions[split] if e.metadata["qtype"] == "retry"]
    ps = _passages(world)
    for e in retry:
      target = ps[e.supporting_ids[0]]
      decoys = [ps[d] for d in e.metadata["decoy_passage_ids"]]
      assert decoys and all(d["title"].split(" (")[0] == target["title"].split(" (")[0] for d in decoys)
      assert all(not contains_words(norm_words(d["text"]), norm_words(e.golden_answers[0])) for d in decoys)

    def hit_rate(queries):
      res, _ = index.retrieve(bm25s.tokenize(queries, show_progress=False), k=3, show_progress=False)
      return np.mean([e.supporting_ids[0] in {ids[j] for j in row} for row, e in zip(res, retry)])
    first = hit_rate([e.metadata["first_query"] for e in retry])
    refined = hit_rate([e.metadata["hops"][0]["query"] for e in retry])
    assert refined >= 0.95 and first <= 0.8 and refined - first >= 0.2, (split, first, refined)


def test_two_hop_question_alone_does_not_retrieve_both_passages(world):
  import bm25s
  corpus = world.corpus("train")
  ids = [p["id"] for p in corpus]
  index = bm25s.BM25()
  index.index(bm25s.tokenize([p["contents"] for p in corpus], show_progress=False), show_progress=False)
  exs = [e for e in world.questions["train"] if e.metadata["qtype"] == "2hop"]
  res, _ = index.retrieve(bm25s.tokenize([e.question for e in exs], show_progress=False), k=3, show_progress=False)
  both = np.mean([set(e.supporting_ids) <= {ids[j] for j in row} for row, e in zip(res, exs)])
  hops = [h for e in exs for h in e.metadata["hops"]]
  res, _ = index.retrieve(bm25s.tokenize([h["query"] for h in hops], show_progress=False), k=3, show_progress=False)
  per_hop = np.mean([h["passage_ids"][0] in {ids[j] for j in row} for row, h in zip(res, hops)])
  assert both < 0.1 and per_hop > 0.95, (both, per_hop)


def test_same_seed_byte_identical_and_seed_matters(tmp_path):
  a = write_flashrag(generate_world(SMALL), str(tmp_path / "a"))
  b = write_flashrag(generate_world(SMALL), str(tmp_path / "b"))
  c = write_flashrag(generate_world(dataclasses.replace(SMALL, seed=1)), str(tmp_path / "c"))
  for key in a:
    assert filecmp.cmp(a[key], b[key], shallow=False), key
    assert not filecmp.cmp(a[key], c[key], shallow=False), key


def test_tfds_world_builder_is_byte_identical_and_round_trips(tmp_path):
  import tensorflow_datasets as tfds
  from ragjax.data.builders import RagjaxWorld
  from ragjax.data.load import load_split
  tfds.disable_progress_bar()
  dirs = []
  for name in ("x", "y"):
    b = RagjaxWorld(config="small", data_dir=str(tmp_path / name))
    b.download_and_prepare()
    dirs.append(b.data_dir)
  shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dirs[0], "*.array_record*")))
  assert len(shards) == 3
  for s in shards:
    assert filecmp.cmp(os.path.join(dirs[0], s), os.path.join(dirs[1], s), shallow=False), s
  world = generate_world(RagjaxWorld.builder_configs["small"].world)
  for split in ("train", "dev", "test"):
    rows = load_split("ragjax_world/small", split, data_dir=str(tmp_path / "x"))
    assert [r for r in rows] == [e.to_record() for e in world.questions[split]]


def test_flashrag_files_round_trip_through_the_flashrag_builder(tmp_path):
  from ragjax.data.builders import FilesConfig, RagjaxFlashrag
  from ragjax.retrieval.corpus_reader import read_passages
  from ragjax.data.flashrag import read_flashrag
  from ragjax.data.load import load_split
  world = generate_world(SMALL)
  paths = write_flashrag(world, str(tmp_path / "flat"))
  assert [p.to_record() for p in read_passages(paths["corpus"])] == world.passages
  back = list(read_flashrag(paths["dev"]))
  assert back == world.questions["dev"]
  b = RagjaxFlashrag(config=FilesConfig(name="w", files={s: [paths[s]] for s in ("train", "dev", "test")}),
                     data_dir=str(tmp_path / "tfds"))
  b.download_and_prepare()
  assert load_split(b, "test")[:] == [e.to_record() for e in world.questions["test"]]


def test_knobs_hops_paraphrases_and_errors():
  deep = generate_world(dataclasses.replace(SMALL, max_hops=3, num_train=200, num_dev=20, num_test=40))
  lengths = {e.metadata["num_hops"] for e in deep.questions["train"] if e.metadata["qtype"] == "2hop"}
  assert lengths == {2, 3}
  for e in deep.questions["train"]:
    pids = [h["passage_ids"][0] for h in e.metadata["hops"]]
    if e.metadata["num_hops"] == 3:
      assert len(set(pids)) == 3
  plain = generate_world(dataclasses.replace(SMALL, paraphrases=1))
  born = [e.question for e in plain.questions["train"]
          if e.metadata["qtype"] == "1hop" and e.metadata["hops"][0]["relation"] == "born_in"]
  assert born and all(q.startswith("In which town was ") for q in born)
  varied = generate_world(SMALL)
  starts = {re.sub(r"[A-Z]\w+", "N", e.question) for e in varied.questions["train"] if e.metadata["qtype"] == "1hop"}
  plain_starts = {re.sub(r"[A-Z]\w+", "N", e.question) for e in plain.questions["train"] if e.metadata["qtype"] == "1hop"}
  assert len(starts) > len(plain_starts)
  no_hop = generate_world(dataclasses.replace(
      SMALL, max_hops=1, qtype_weights=(("1hop", 0.7), ("comparison", 0.2), ("retry", 0.1))))
  assert all(e.metadata["num_hops"] == 1 for e in no_hop.questions["train"] if e.metadata["qtype"] != "comparison")
  with pytest.raises(ValueError, match="2hop"):
    WorldConfig(max_hops=1)
  with pytest.raises(ValueError, match="retry_groups"):
    generate_world(dataclasses.replace(SMALL, num_train=5000))


def test_several_train_worlds_keep_the_test_world_disjoint():
  from ragjax.data.world import WorldConfig, generate_world, norm_words
  cfg = WorldConfig(train_worlds=3, num_train=300, num_dev=20, num_test=40, num_people=30,
                    num_places=10, num_orgs=8, num_works=12, retry_groups=6)
  w = generate_world(cfg)
  worlds = {e.metadata["world"] for e in w.questions["train"]}
  assert worlds == {0, 1, 2}
  assert {e.metadata["world"] for e in w.questions["test"]} == {3}
  assert {e.metadata["world"] for e in w.questions["dev"]} == {0}
  kinds = {"company", "guild", "bank", "school", "club", "press"}
  train_words = {x for wi in range(3) for n in w.entity_names(wi) for x in norm_words(n)} - kinds
  test_words = {x for n in w.entity_names(3) for x in norm_words(n)} - kinds
  assert test_words and not (train_words & test_words)
  assert {p["id"][:3] for p in w.corpus("train")} == {"w0-", "w1-", "w2-"}
  assert {p["id"][:3] for p in w.corpus("test")} == {"w3-"}


def test_name_lexicon_reuses_words_but_never_full_names_or_facts():
  """name_lexicon: every world draws its name words from one shared stock (so the test world's
  names are familiar tokens), but no full name is in two worlds, no word names two entities
  of one world, and the test world's facts are its own."""
  from ragjax.data.world_language import ORG_KINDS, PLACE_KINDS
  cfg = WorldConfig(train_worlds=3, num_train=300, num_dev=20, num_test=40, num_people=30,
                    num_places=10, num_orgs=8, num_works=12, retry_groups=6, name_lexicon=150)
  w = generate_world(cfg)
  kinds = set(ORG_KINDS) | set(PLACE_KINDS)
  words = {wi: [x for e in w.entities if e.world == wi for x in e.name.split()
                if x not in kinds] for wi in range(4)}
  lexicon = set().union(*map(set, words.values()))
  assert len(lexicon) <= 150
  seen = set().union(*(set(words[wi]) for wi in range(3)))
  assert np.mean([x in seen for x in words[3]]) > 0.9  # familiar tokens
  people = [e.name.split() for e in w.entities if e.etype == "person"]
  assert not {g for g, _ in people} & {s for _, s in people}  # given names, surnames: 2 classes
  full = [(e.world, e.name) for e in w.entities]
  by_name = {}
  for wi, n in full:
    by_name.setdefault(n, set()).add(wi)
  assert all(len(ws) == 1 for ws in by_name.values())  # namesakes only inside one world
  for wi in range(4):  # a word is one entity's word per world (twins share one on purpose)
    ents = [e for e in w.entities if e.world == wi]
    assert all(e.name.split()[-1] in PLACE_KINDS for e in ents if e.etype == "place")
    assert len(set(words[wi])) >= 0.7 * len(words[wi])
  test_facts = {(e.name, r, v) for e in w.entities if e.world == 3 for r, v in e.facts.items()}
  train_facts = {(e.name, r, v) for e in w.entities if e.world < 3 for r, v in e.facts.items()}
  assert not test_facts & train_facts
  for e in w.questions["test"]:  # still answered by test-world passages only
    assert all(pid.startswith("w3-") for pid in e.supporting_ids)
  with pytest.raises(RuntimeError, match="name_lexicon"):
    generate_world(dataclasses.replace(cfg, name_lexicon=20))
  with pytest.raises(ValueError, match="name_lexicon"):
    WorldConfig(name_lexicon=-1)


def test_name_classes_keep_each_kind_of_name_in_its_own_words():
  """name_classes: given names, surnames, towns, groups and works' two words come from
  disjoint parts of the lexicon, so no town or group shares a word with a person or a work
  (with the halves alone, a town's word is a given name); the shared-stock guarantees hold,
  and without the flag the world is the one the halves alone give."""
  from ragjax.data.world_language import ORG_KINDS, PLACE_KINDS
  from ragjax.data.world_names import CLASS_SHARES
  cfg = WorldConfig(train_worlds=3, num_train=300, num_dev=20, num_test=40, num_people=30,
                    num_places=10, num_orgs=8, num_works=12, retry_groups=6, name_lexicon=300)
  halves, classes = generate_world(cfg), generate_world(dataclasses.replace(cfg, name_classes=True))

  def words_by_kind(w):
    out = {"person": set(), "place": set(), "org": set(), "work": set()}
    for e in w.entities:
      out[e.etype] |= set(e.name.split()) - set(ORG_KINDS) - set(PLACE_KINDS)
    return out
  by_kind = words_by_kind(classes)
  for a in by_kind:
    for b in by_kind:
      assert a == b or not by_kind[a] & by_kind[b], (a, b)
  assert len(by_kind["place"]) <= round(dict(CLASS_SHARES)["place"] * 300)
  old = words_by_kind(halves)
  assert old["place"] & old["person"]              # what the classes take away
  worlds_of = {}
  for e in classes.entities:
    worlds_of.setdefault(e.name, set()).add(e.world)
  assert all(len(ws) == 1 for ws in worlds_of.values())   # namesakes only inside one world
  assert generate_world(cfg).passages == halves.passages          # the flag off: unchanged
  for e in classes.questions["test"]:
    assert all(pid.startswith("w3-") for pid in e.supporting_ids)
  from ragjax.data.world_names import NamePool
  with pytest.raises(ValueError, match="unknown kind of name word 'town'"):
    NamePool(random.Random(0), lexicon=30, classes=True).word(kind="town")


@pytest.mark.parametrize("argv,says", [
    (["--num_train", "-5"], "argument --num_train: must be >= 0, got -5"),
    (["--num_places", "1"], "argument --num_places: must be >= 3, got 1"),
    (["--distractor_rate", "1.5"], "argument --distractor_rate: must be in 0..1, got 1.5"),
    (["--paraphrases", "0"], "argument --paraphrases: must be in 1..3, got 0"),
    (["--train_worlds", "0"], "argument --train_worlds: must be >= 1, got 0"),
    (["--vocab_size", "10"], "argument --vocab_size: must be >= "),
    (["--num_train", "0", "--num_dev", "0", "--num_test", "0"], "would have no questions"),
])
def test_make_world_rejects_bad_counts_before_generating(tmp_path, capsys, argv, says):
  from ragjax.data.make_world import main
  with pytest.raises(SystemExit) as e:
    main(["--out", str(tmp_path / "w")] + argv)
  assert e.value.code == 2
  assert says in capsys.readouterr().err.strip().splitlines()[-1]
  assert not (tmp_path / "w").exists()


def test_a_later_test_world_is_fresh_and_leaves_training_unchanged():
  """world.test_world: the test questions come from a world no run trained on; its entity
  names are disjoint from the training world's and from the default test world's."""
  cfg = dataclasses.replace(SMALL, name_lexicon=200)
  base = generate_world(cfg)
  fresh = generate_world(dataclasses.replace(cfg, test_world=cfg.train_worlds + 2))
  assert [e.question for e in base.questions["train"]] == [e.question for e in fresh.questions["train"]]
  names = lambda w, i: {e.name for e in w.entities if e.world == i}
  k = cfg.train_worlds
  assert not names(fresh, k + 2) & names(base, k) and not names(fresh, k + 2) & names(base, 0)
  assert {e.metadata["world"] for e in fresh.questions["test"]} == {k + 2}
  assert all(p["id"].startswith(f"w{k + 2}-") for p in fresh.corpus("test"))
  with pytest.raises(ValueError, match="is a training world"):
    dataclasses.replace(cfg, test_world=0)


def test_trace_shares_demonstrate_imperfect_decisions():
  """Each decision share gives that share (within sampling error) of its question type's
  traces; with every share 0 the traces are the paper-style ones (always search, retry)."""
  import random
  from ragjax.data.world_traces import TraceShares, trace_turns, wrong_answer
  world = generate_world(dataclasses.replace(SMALL, num_train=300))
  recs = [e.to_record() for e in world.questions["train"]]
  by = {q: [r for r in recs if r["metadata"]["qtype"] == q] for q in ("1hop", "2hop", "retry")}
  plain = [trace_turns(r, random.Random(0)) for r in recs]
  assert all(t[0].startswith("<search>") and t[-1] == f"<answer> {r['golden_answers'][0]} </answer>"
             for t, r in zip(plain, recs))
  shares = TraceShares(wasted_query_rate=0.0, no_search_rate=0.3, first_hop_stop_rate=0.5,
                       give_up_rate=0.5)
  rng = random.Random(1)
  traces = {q: [trace_turns(r, rng, shares) for r in rs] for q, rs in by.items()}
  no_search = [len(t) == 1 for ts in traces.values() for t in ts]
  assert abs(np.mean(no_search) - 0.3) < 0.08
  two = [t for t in traces["2hop"] if len(t) > 1]
  stop = [len(t) == 2 for t in two]          # first hop then answer; else 2 searches + answer
  assert abs(np.mean(stop) - 0.5 / 0.7) < 0.12
  for t, r in zip(traces["2hop"], by["2hop"]):
    if len(t) == 2:
      assert t[1] == f"<answer> {r['metadata']['hops'][0]['answer']} </answer>"
  for t, r in zip(traces["retry"], by["retry"]):
    if len(t) == 2:                            # gave up: the namesake's value, not the gold
      assert t[0] == f"<search> {r['metadata']['first_query']} </search>"
      assert t[1] == f"<answer> {r['metadata']['decoy_answers'][0]} </answer>"
      assert r["metadata"]["decoy_answers"][0] not in r["golden_answers"]
  for r in recs:
    assert wrong_answer(r) not in r["golden_answers"]
  with pytest.raises(ValueError, match="traces.give_up_rate"):
    TraceShares(give_up_rate=1.5)


def test_answer_and_refine_misses_are_drawn_apart():
  """`answer_miss_rate`: a searched trace answers a wrong value in that share;
  `refine_miss_rate`: a refine block after a search that found its value says "not found" in
  that share; the two draws are independent, so the answer does not follow the refine."""
  import random
  from ragjax.data.world_traces import TraceShares, make_scripts, trace_turns, wrong_answer
  world = generate_world(dataclasses.replace(SMALL, num_train=300,
                                             qtype_weights=(("1hop", 0.7), ("2hop", 0.3))))
  recs = [e.to_record() for e in world.questions["train"]
          if e.to_record()["metadata"]["qtype"] == "1hop"]
  assert len(recs) > 100
  rng = random.Random(0)
  traces = [trace_turns(r, rng, TraceShares(wasted_query_rate=0.0, answer_miss_rate=0.4))
            for r in recs]
  assert all(t[0] == f"<search> {r['metadata']['hops'][0]['query']} </search>"
             for t, r in zip(traces, recs))      # every trace still searches
  missed = [t[-1] == f"<answer> {wrong_answer(r)} </answer>" for t, r in zip(traces, recs)]
  right = [t[-1] == f"<answer> {r['golden_answers'][0]} </answer>" for t, r in zip(traces, recs)]
  assert all(m != g for m, g in zip(missed, right)) and abs(np.mean(missed) - 0.4) < 0.1
  shares = TraceShares(wasted_query_rate=0.0, answer_miss_rate=0.5, refine_miss_rate=0.6)
  scripts = make_scripts(recs, 0, shares, refine=True)
  refine_gold = [s[1].startswith(f"<refine> {r['metadata']['hops'][0]['answer']} </refine>")
                 for s, r in zip(scripts, recs)]
  refine_none = [s[1].startswith("<refine> not found </refine>") for s in scripts]
  answer_gold = [s[1].endswith(f"<answer> {r['golden_answers'][0]} </answer>")
                 for s, r in zip(scripts, recs)]
  assert all(a != b for a, b in zip(refine_gold, refine_none))
  assert abs(np.mean(refine_none) - 0.6) < 0.1 and abs(np.mean(answer_gold) - 0.5) < 0.1
  g, n = np.array(refine_gold), np.array(answer_gold)
  assert abs(n[g].mean() - n[~g].mean()) < 0.2     # independent draws: same answer rate
  assert make_scripts(recs, 0, TraceShares(wasted_query_rate=0.0), refine=True)[0][1] \
      .startswith(f"<refine> {recs[0]['metadata']['hops'][0]['answer']} </refine>")
  with pytest.raises(ValueError, match="traces.refine_miss_rate"):
    TraceShares(refine_miss_rate=-0.1)


def test_swapped_answers_take_a_value_of_the_same_relation():
  """`swap_answers`: the share of entity questions it swaps, each to another question's value
  of the same final relation (aliases follow); comparisons never; rate 0 changes nothing."""
  from ragjax.data.world_traces import swap_answers
  recs = [e.to_record() for e in generate_world(dataclasses.replace(SMALL, num_train=300))
          .questions["train"]]
  assert swap_answers(recs, 0.0, seed=0) == recs
  pools = {}
  for r in recs:
    if r["metadata"]["qtype"] != "comparison":
      pools.setdefault(r["metadata"]["hops"][-1]["relation"], set()).add(r["golden_answers"][0])
  half = swap_answers(recs, 0.5, seed=0)
  assert half == swap_answers(recs, 0.5, seed=0)          # deterministic in the seed
  swapped = [(a, b) for a, b in zip(recs, half) if "answer_swap" in b["metadata"]]
  entity = [r for r in recs if r["metadata"]["qtype"] != "comparison"]
  assert abs(len(swapped) / len(entity) - 0.5) < 0.1
  for old, new in swapped:
    was, now = new["metadata"]["answer_swap"]
    assert was == old["golden_answers"][0] != now == new["golden_answers"][0]
    assert now in pools[old["metadata"]["hops"][-1]["relation"]]
    assert new["metadata"]["hops"][-1]["answer"] == now
    assert new["golden_answers"][1:] == [a.replace(was, now) for a in old["golden_answers"][1:]]
    assert new["question"] == old["question"] and new["metadata"]["qtype"] != "comparison"
    assert now not in old["metadata"].get("decoy_answers", []) + [h["answer"] for h in old["metadata"]["hops"]]
  assert all("answer_swap" not in r["metadata"] for r in recs)      # the input is not changed
  with pytest.raises(ValueError, match="swap_answer_rate"):
    swap_answers(recs, 1.5, seed=0)


def test_swapped_traces_read_the_swapped_value_off_the_passages(tmp_path):
  """Scripted traces through the real engine and a real BM25 index over the world's corpus:
  a swapped trace's documents and answer state the new value and never the old one; an
  unswapped trace's documents are the index's own."""
  import _rollout_helpers as h
  from ragjax.data.world_traces import AnswerSwapRetriever, make_scripts, swap_answers
  from ragjax.retrieval.bm25 import BM25Index
  from ragjax.retrieval.retrievers import BM25Retriever
  from ragjax.retrieval.store import PassageStore, write_store
  from ragjax.retrieval.types import Passage
  from ragjax.rollout.engine import RolloutEngine
  from ragjax.rollout.protocols import get_protocol
  from ragjax.rl.teacher_traces import teacher_traces
  world = generate_world(SMALL)
  write_store([Passage(p["id"], p["title"], p["text"]) for p in world.corpus("train")],
              str(tmp_path))
  store = PassageStore(str(tmp_path))
  bm25 = BM25Retriever(store, BM25Index.build(store.contents()))
  recs = [e.to_record() for e in world.questions["train"]
          if e.metadata["qtype"] in ("1hop", "2hop")][:16]
  swapped = swap_answers(recs, 0.5, seed=3)
  tok = h.tokenizer(chat=False)
  proto = get_protocol("world", top_k=2, max_turns=3)
  engine = RolloutEngine(proto, h.ScriptedPolicy(tok, {}, stop_strings=proto.stop_sequences),
                         bm25, tok)
  scripts = make_scripts(swapped, 0)
  texts = {}

  def keep(batch, offset):
    for i, row in enumerate(batch.rows):
      texts[offset + i] = row.response_text
  teacher_traces(engine, swapped, scripts, max_new_tokens=64, cache_length=4096,
                 retriever=AnswerSwapRetriever(bm25), on_batch=keep)
  plain = {}
  teacher_traces(engine, recs, make_scripts(recs, 0), max_new_tokens=64, cache_length=4096,
                 on_batch=lambda b, o: plain.update({o + i: r.response_text
                                                     for i, r in enumerate(b.rows)}))
  n_swapped = 0
  for i, (old, new) in enumerate(zip(recs, swapped)):
    if "answer_swap" not in new["metadata"]:
      assert texts[i] == plain[i]
      continue
    was, now = new["metadata"]["answer_swap"]
    docs = texts[i].rsplit("<answer>", 1)[0]
    if was in plain[i].rsplit("<answer>", 1)[0]:      # the search found the answer's passage
      n_swapped += 1
      assert now in docs and not re.search(rf"(?<!\w){re.escape(was)}(?!\w)", docs), texts[i]
    assert texts[i].rstrip().endswith(f"<answer> {now} </answer>")
  assert n_swapped >= 4


def test_quoted_traces_think_the_sentence_that_states_the_value():
  """`traces.quote`: every turn after a search opens with `<think> S </think>`, S the passage's
  sentence stating the value that search finds (the namesake's for a retry's first query, the
  swapped value in a swapped trace); a search of the whole question is not quoted."""
  from ragjax.data.world_traces import TraceShares, found_values, make_scripts, swap_answers
  world = generate_world(dataclasses.replace(SMALL, num_train=300))
  passages = {p["id"]: p["text"] for p in world.passages}
  recs = swap_answers([e.to_record() for e in world.questions["train"]], 0.3, seed=0)
  shares = TraceShares(wasted_query_rate=0.5)
  plain = make_scripts(recs, 0, shares)
  quoted = make_scripts(recs, 0, shares, quote=True, passages=passages)
  kinds = set()
  for r, p, q in zip(recs, plain, quoted):
    assert len(p) == len(q) and q[0] == p[0]
    found = found_values(r)
    swap = r["metadata"].get("answer_swap")
    for prev, turn, bare in zip(q, q[1:], p[1:]):
      query = re.fullmatch(r"<search> (.*) </search>", prev.split("</think> ")[-1]).group(1)
      if query not in found:                          # the question searched whole
        assert turn == bare and query == r["question"].rstrip("?")
        kinds.add("unquoted")
        continue
      m = re.fullmatch(r"<think> (.*) </think> (.*)", turn)
      assert m and m.group(2) == bare, turn
      value, pid = found[query]
      sentence = m.group(1)
      assert re.search(rf"(?<!\w){re.escape(value)}(?!\w)", sentence)
      if swap and query == r["metadata"]["hops"][-1]["query"]:
        assert sentence.replace(swap[1], swap[0]) in passages[pid]
        kinds.add("swapped")
      else:
        assert sentence in passages[pid]
        kinds.add("retry first" if query == r["metadata"].get("first_query") else "hop")
  assert kinds == {"unquoted", "swapped", "hop", "retry first"}
  assert [[re.sub(r"^<think> .*? </think> ", "", t) for t in q] for q in quoted] == plain
  with pytest.raises(ValueError, match="passages"):
    make_scripts(recs, 0, quote=True)


def test_every_world_knob_is_a_config_field():
  """Each WorldConfig field can be set from the command line (`--config.world.FIELD=`), e.g.
  the README's fresh-world evaluation `--config.world.test_world=20`, with the same default."""
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "configs"))
  import common
  world = common.get_config().world
  for f in dataclasses.fields(WorldConfig):
    if f.name == "qtype_weights":      # a tuple of pairs: set in code, not on a command line
      continue
    assert f.name in world and world[f.name] == f.default, f.name
