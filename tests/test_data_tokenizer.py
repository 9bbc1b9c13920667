"""The small-policy tokenizer: trained on world 0, loadable by transformers, deterministic."""

import dataclasses
import filecmp
import os
import re

import numpy as np
import pytest

from ragjax.data.tokenizer import PROTOCOL_TAGS, SPECIAL_TOKENS, train_world_tokenizer
from ragjax.data.world import WorldConfig, generate_world
from ragjax.data.world_language import ORG_KINDS

CFG = WorldConfig(num_people=30, num_places=10, num_orgs=8, num_works=15, retry_groups=6,
                  num_train=120, num_dev=20, num_test=40)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  world = generate_world(CFG)
  out = str(tmp_path_factory.mktemp("tok") / "a")
  train_world_tokenizer(out, world=world, vocab_size=1024)
  return world, out


def test_loads_with_autotokenizer_and_tags_are_single_tokens(saved):
  from transformers import AutoTokenizer
  world, out = saved
  tok = AutoTokenizer.from_pretrained(out)
  assert 300 < len(tok) <= 1024
  assert [tok.pad_token, tok.bos_token, tok.eos_token] == list(SPECIAL_TOKENS)
  assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id] == [0, 1, 2]
  tag_ids = tok.convert_tokens_to_ids(list(PROTOCOL_TAGS))
  assert len(set(tag_ids)) == len(PROTOCOL_TAGS) and max(tag_ids) == len(tok) - 1
  ex = world.questions["train"][0]
  text = (f"<think>I should search.</think><search>{ex.metadata['hops'][0]['query']}</search>"
          f"<information>{world.passages[0]['contents']}</information><answer>{ex.golden_answers[0]}</answer>")
  ids = tok.encode(text, add_special_tokens=False)
  for tag, tid in zip(PROTOCOL_TAGS, tag_ids):
    assert ids.count(tid) == 1, tag
  # Tags survive skip_special_tokens (the rollout parser reads them); pad/eos do not.
  assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == text
  assert tok.decode(ids + [tok.eos_token_id]) == text + tok.eos_token


def test_round_trips_unseen_test_world_text_and_compresses_world_text(saved):
  from transformers import AutoTokenizer
  world, out = saved
  tok = AutoTokenizer.from_pretrained(out)
  for p in world.corpus("test")[:50]:  # names never seen in training: bytes still cover them
    assert tok.decode(tok.encode(p["contents"], add_special_tokens=False)) == p["contents"]
  odd = "Ünïcode ✓ 東京 \t tabs"
  assert tok.decode(tok.encode(odd, add_special_tokens=False)) == odd
  words = sum(len(p["text"].split()) for p in world.corpus("train"))
  tokens = sum(len(tok.encode(p["text"], add_special_tokens=False)) for p in world.corpus("train"))
  assert tokens / words < 2.0, tokens / words  # merges learned; raw bytes would be ~6


def test_same_seed_gives_identical_files_and_seed_matters(saved, tmp_path):
  world, out = saved
  again = str(tmp_path / "b")
  train_world_tokenizer(again, cfg=CFG, vocab_size=1024)
  for name in sorted(os.listdir(out)):
    assert filecmp.cmp(os.path.join(out, name), os.path.join(again, name), shallow=False), name
  other = str(tmp_path / "c")
  train_world_tokenizer(other, cfg=dataclasses.replace(CFG, seed=5), vocab_size=1024)
  assert not filecmp.cmp(os.path.join(out, "tokenizer.json"), os.path.join(other, "tokenizer.json"), shallow=False)


def test_chat_template_and_vocab_guard(saved):
  from transformers import AutoTokenizer
  _, out = saved
  tok = AutoTokenizer.from_pretrained(out)
  s = tok.apply_chat_template([{"role": "user", "content": "Where was Kalo Venn born?"}], tokenize=False,
                              add_generation_prompt=True)
  assert s == "user: Where was Kalo Venn born?\nassistant: "
  with pytest.raises(ValueError, match="too small"):
    train_world_tokenizer(None, world=generate_world(CFG), vocab_size=200)


def _names(world, split):
  return sorted({w for p in world.corpus(split) for w in p["title"].split()
                 if w.isalpha() and w[0].isupper()} - set(ORG_KINDS))


def test_syllable_split_cuts_unseen_names_like_the_training_names():
  """At the embedded default's world size with all-new name words (name_lexicon=0),
  syllables=True splits test-world names (never seen)
  into one familiar piece per syllable, as many pieces as training names get; the plain BPE
  splits them into more, rarer pieces.  Lower-case words stay whole; text round-trips."""
  from configs.world import get_config
  from ragjax.typed_config import from_dict
  world = generate_world(dataclasses.replace(from_dict(WorldConfig, get_config().world),
                                             name_lexicon=0))
  tok = train_world_tokenizer(None, world=world, vocab_size=2048, syllables=True)
  plain = train_world_tokenizer(None, world=world, vocab_size=2048)
  pre = tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str("Where was Brakotel Sumo born in 1850?")
  assert [p for p, _ in pre] == ["Whe", "re", "Ġwas", "ĠBra", "ko", "tel", "ĠSu", "mo", "Ġborn",
                                 "Ġin", "Ġ1850", "?"]

  def pieces(t, text):
    return [t.decode([i]) for i in t.encode(text, add_special_tokens=False)]

  def per_name(t, names):
    return np.mean([len(pieces(t, " " + n)) for n in names])

  train_names, test_names = _names(world, "train"), _names(world, "test")
  assert len(test_names) > 100 and not set(test_names) & set(train_names)
  train_pieces = {g for p in world.corpus("train") for g in pieces(tok, p["contents"])}
  got = [pieces(tok, " " + n) for n in test_names]
  assert all("".join(g) == " " + n for g, n in zip(got, test_names))
  seen = np.mean([x in train_pieces for g in got for x in g])
  one_per_syllable = np.mean([len(g) == sum(ch in "aeiou" for ch in n.lower())
                              for g, n in zip(got, test_names)])
  assert seen > 0.95 and one_per_syllable > 0.95, (seen, one_per_syllable)
  syl_ratio = per_name(tok, test_names) / per_name(tok, train_names)
  plain_ratio = per_name(plain, test_names) / per_name(plain, train_names)
  assert abs(syl_ratio - 1) < 0.05 and plain_ratio > 1.1, (syl_ratio, plain_ratio)
  for p in world.corpus("test")[:50]:
    assert tok.decode(tok.encode(p["contents"], add_special_tokens=False)) == p["contents"]
  for w in (" founded", " born", " worked", " town"):  # template words: one token, as before
    assert len(pieces(tok, w)) == 1 and len(pieces(plain, w)) == 1


def test_digit_pairs_make_every_year_two_tokens():
  """digit_pairs=True: at the embedded default's size, every year of the world is ' 19' + '11'
  whatever its frequency, so every year answer is the same two kinds of token; the plain BPE
  merges frequent years whole and splits rare ones unevenly.  Text still round-trips."""
  from configs.world import get_config
  from ragjax.typed_config import from_dict
  world = generate_world(from_dict(WorldConfig, get_config().world))
  tok = train_world_tokenizer(None, world=world, vocab_size=2048, digit_pairs=True)
  plain = train_world_tokenizer(None, world=world, vocab_size=2048)

  def pieces(t, text):
    return [t.decode([i]) for i in t.encode(text, add_special_tokens=False)]

  years = sorted({y for p in world.corpus() for y in re.findall(r"\b1\d\d\d\b", p["text"])})
  assert len(years) > 300
  got = [pieces(tok, " " + y) for y in years]
  assert all(g == [" " + y[:2], y[2:]] for g, y in zip(got, years)), got[:3]
  assert len({len(pieces(plain, " " + y)) for y in years}) > 1
  text = "Kalo Venn was born in 1850 and died in 1911; 42 clocks."
  assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
