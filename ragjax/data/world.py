"""The synthetic search world: fictional entities, a passage corpus and questions that need search.

People, towns, groups (organisations) and works get made-up names and random facts, so no
model can answer from memory.  Every fact is stated in exactly one passage of its subject,
which makes the passages that answer each hop well defined (`metadata.hops`).  Questions:
- '1hop': one fact ("Where was Kalo Venn born?");
- '2hop': a bridge chain of 2..max_hops facts ("Where was the maker of Sora Lend born?");
- 'comparison': yes/no over two entities ("Was Kalo Venn born before Mira Tos?");
- 'retry': about a person who shares the full name with decoys; the obvious query
  (`metadata.first_query`, the name alone) tends to land on a namesake's passage and the
  refined query (`hops[0].query`, name plus occupation) finds the right one, as in ReZero.
Train and dev come from worlds 0..K-1 (dev from world 0); test from world K, whose entities
and facts are all new; its name words are new too, or drawn from the shared `name_lexicon`.

`generate_world(WorldConfig())` takes about a second; the output is a pure function of the
config (same seed, byte-identical files).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import re
from typing import Optional

from ragjax.data.schema import Example, make_example
from ragjax.data.world_language import (COMPARISONS, FILLERS, MENTIONS, OCCUPATIONS,
                                        ORG_KINDS, PLACE_KINDS, PRODUCTS, RELATIONS, RELATIONS_OF,
                                        RETRY_RELATIONS, WORK_KINDS, YEAR_RANGES, Relation)
from ragjax.data.world_names import NamePool
from ragjax.retrieval.records import write_jsonl
from ragjax.retrieval.types import join_contents

QTYPES = ("1hop", "2hop", "comparison", "retry")
# Questions whose answer is an entity or a value found by searching, apart from the yes/no
# comparisons (which a policy that never searches gets right half the time).
ENTITY_QTYPES = ("1hop", "2hop", "retry")
SPLITS = ("train", "dev", "test")
DATA_SOURCE = "ragjax_world"

# Allowed range of every numeric WorldConfig field (None: unbounded).  The generator draws
# distinct places and organisations in pairs/triples, so it needs at least 3 and 2 of them;
# rates are shares.  `make_world` turns the same table into its flag checks.
BOUNDS: dict[str, tuple] = {
    "num_people": (0, None), "num_places": (3, None), "num_orgs": (2, None), "num_works": (0, None),
    "retry_groups": (0, None), "retry_decoys": (0, None), "distractor_rate": (0.0, 1.0),
    "mention_rate": (0.0, 1.0), "facts_per_passage": (1, None), "min_passage_words": (0, None),
    "paraphrases": (1, 3), "max_hops": (1, 3), "num_train": (0, None), "train_worlds": (1, None),
    "name_lexicon": (0, None), "num_dev": (0, None), "num_test": (0, None),
    "test_world": (-1, None)}


def bound_text(lo, hi) -> str:
  if hi is None:
    return f">= {lo}"
  return f"{lo}..{hi}"


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """Knobs: size (entity counts), hops, distractors, paraphrase variety, question counts."""
  seed: int = 0
  num_people: int = 80
  num_places: int = 25
  num_orgs: int = 20
  num_works: int = 40
  retry_groups: int = 20            # namesake groups per world (targets of 'retry' questions)
  retry_decoys: int = 2             # namesakes per group besides each target
  distractor_rate: float = 0.3      # share of people/groups/works given a near-name twin
  mention_rate: float = 0.3         # chance a passage mentions another entity in passing
  facts_per_passage: int = 2
  min_passage_words: int = 24
  paraphrases: int = 3              # templates used per relation, 1..3
  max_hops: int = 2                 # bridge questions have 2..max_hops hops; 1 disables them
  num_train: int = 1000
  train_worlds: int = 1             # worlds the train questions come from (more names to copy)
  name_lexicon: int = 0             # >0: every world draws name words from this many shared
                                    # words (new entities and facts, familiar tokens); 0: all new
  name_classes: bool = False        # with name_lexicon: a part of the stock per kind of name
                                    # (given, surname, town, group, work), never shared
  num_dev: int = 100
  num_test: int = 200
  # The test world's index: -1 = train_worlds (the world right after the training ones); a
  # larger index is a world no training run built (the worlds between are drawn, so the name
  # stock moves on, but not kept): evaluating there is a fresh-world test.
  test_world: int = -1
  qtype_weights: tuple[tuple[str, float], ...] = (
      ("1hop", 0.3), ("2hop", 0.4), ("comparison", 0.15), ("retry", 0.15))

  def __post_init__(self):
    for name, (lo, hi) in BOUNDS.items():
      value = getattr(self, name)
      if (lo is not None and value < lo) or (hi is not None and value > hi) or value != value:
        raise ValueError(f"{name} must be {bound_text(lo, hi)}, got {value}")
    if 0 <= self.test_world < self.train_worlds:
      raise ValueError(f"test_world {self.test_world} is a training world (0..{self.train_worlds - 1}); "
                       f"use -1 or an index >= train_worlds")
    if self.num_train + self.num_dev + self.num_test < 1:
      raise ValueError("num_train, num_dev and num_test are all 0: the world would have no questions")
    weights = dict(self.qtype_weights)
    unknown = set(weights) - set(QTYPES)
    if unknown:
      raise ValueError(f"unknown question types {sorted(unknown)}; use {QTYPES}")
    if self.max_hops < 2 and weights.get("2hop", 0) > 0:
      raise ValueError("max_hops=1 leaves no 2hop questions: set the '2hop' weight to 0")
    if weights.get("retry", 0) > 0 and (self.retry_groups < 1 or self.retry_decoys < 1):
      raise ValueError("'retry' questions need retry_groups >= 1 and retry_decoys >= 1")
    if self.retry_decoys + 1 > len(OCCUPATIONS):
      raise ValueError(f"retry_decoys must be < {len(OCCUPATIONS)}")

  @property
  def test_index(self) -> int:
    return self.train_worlds if self.test_world < 0 else self.test_world


@dataclasses.dataclass
class Entity:
  id: str
  etype: str
  name: str
  world: int
  title: str                      # passage title; namesakes get 'Name (occupation)'
  disamb: Optional[str] = None    # occupation of a namesake, None when the name is unique
  kind: Optional[str] = None      # work kind (book, song, ...) or group kind
  aliases: tuple[str, ...] = ()
  facts: dict[str, str] = dataclasses.field(default_factory=dict)  # relation -> value or entity id


@dataclasses.dataclass
class World:
  config: WorldConfig
  entities: list[Entity]
  passages: list[dict]                 # {id, title, text, contents}; ids 'w0-…' / 'w1-…'
  questions: dict[str, list[Example]]  # 'train' (worlds 0..K-1), 'dev' (0), 'test' (K)

  def corpus(self, split: Optional[str] = None) -> list[dict]:
    """Passages of the worlds a split's questions come from (all passages when None)."""
    if split is None:
      return list(self.passages)
    prefixes = tuple(f"w{wi}-" for wi in worlds_of_split(split, self.config.train_worlds,
                                                         self.config.test_index))
    return [p for p in self.passages if p["id"].startswith(prefixes)]

  def entity_names(self, world: int) -> list[str]:
    return [e.name for e in self.entities if e.world == world]


def world_of_split(split: str, train_worlds: int = 1, test_world: int = -1) -> int:
  """The world a split's first question comes from: test is world K (= train_worlds) unless
  `test_world` names a later one."""
  return worlds_of_split(split, train_worlds, test_world)[0]


def worlds_of_split(split: str, train_worlds: int = 1, test_world: int = -1) -> tuple[int, ...]:
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; use {SPLITS}")
  if split == "test":
    return (train_worlds if test_world < 0 else test_world,)
  return tuple(range(train_worlds)) if split == "train" else (0,)


_WORD = re.compile(r"[a-z0-9]+")
_ARTICLES = frozenset(("a", "an", "the"))


def norm_words(text: str) -> tuple[str, ...]:
  """SQuAD-style normalisation as a word tuple: lower case, no punctuation, no articles."""
  return tuple(w for w in _WORD.findall(text.lower()) if w not in _ARTICLES)


def contains_words(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
  n = len(needle)
  return n > 0 and any(hay[i:i + n] == needle for i in range(len(hay) - n + 1))


def _reserved_words() -> frozenset[str]:
  texts = [*OCCUPATIONS, *PRODUCTS, *ORG_KINDS, *WORK_KINDS, "yes", "no", "town"]
  for r in RELATIONS.values():
    texts += [*r.state, *r.ask, r.query, *r.describe]
  for c in COMPARISONS:
    texts += list(c.ask)
  for fs in FILLERS.values():
    texts += list(fs)
  texts += [m[0] for m in MENTIONS.values()]
  return frozenset(w for t in texts for w in _WORD.findall(t.lower()))


class _WorldBuilder:
  """Builds one world's entities and passages (world index `wi`)."""

  def __init__(self, cfg: WorldConfig, wi: int, pool: NamePool):
    self.cfg, self.wi, self.pool = cfg, wi, pool
    self.rng = random.Random(f"ragjax-world-{cfg.seed}-{wi}")
    self.entities: list[Entity] = []
    self.by_id: dict[str, Entity] = {}
    self.groups: list[list[Entity]] = []   # namesake groups
    self.passages: list[dict] = []
    self.fact_pid: dict[tuple[str, str], str] = {}
    self.pid_entity: dict[str, Entity] = {}

  # -- entities ---------------------------------------------------------------------------
  def _add(self, etype: str, name: str, **kw) -> Entity:
    eid = f"w{self.wi}-{etype}-{sum(e.etype == etype for e in self.entities):04d}"
    e = Entity(id=eid, etype=etype, name=name, world=self.wi, title=kw.pop("title", name), **kw)
    self.entities.append(e)
    self.by_id[eid] = e
    return e

  def _year(self, etype: str) -> str:
    lo, hi = YEAR_RANGES[etype]
    return str(self.rng.randint(lo, hi))

  def _name(self, make) -> str:
    """A full name `make()` that no world has yet (words may repeat with a lexicon)."""
    for _ in range(1000):
      name = make()
      if self.pool.claim(name):
        return name
    raise RuntimeError(f"world {self.wi}: no new full name after 1000 tries; raise name_lexicon")

  def _place_name(self) -> str:
    if self.pool.lexicon:
      return self._name(lambda: f"{self.pool.word(kind='place')} {self.rng.choice(PLACE_KINDS)}")
    return self._name(lambda: self.pool.word(2, 3))

  def _person(self, name: str, **kw) -> Entity:
    given, sur = name.split()
    return self._add("person", name, aliases=(name, f"{given[0]}. {sur}"), **kw)

  def _titled(self, etype: str, name: str, **kw) -> Entity:
    return self._add(etype, name, aliases=(name,), **kw)

  def build_entities(self) -> None:
    cfg, rng, pool = self.cfg, self.rng, self.pool
    places = [self._add("place", w, aliases=(w, f"{w} town")) for w in
              (self._place_name() for _ in range(cfg.num_places))]
    people = [self._person(self._name(lambda: f"{pool.word()} {pool.word(kind='surname')}"))
              for _ in range(cfg.num_people)]
    twins = []
    for src in rng.sample(people, round(cfg.distractor_rate * len(people))):
      given, sur = src.name.split()
      twins.append((src, self._person(self._name(
          lambda: f"{given} {pool.word(kind='surname')}" if rng.random() < 0.5 else f"{pool.word()} {sur}"))))
    for _ in range(cfg.retry_groups):
      name = self._name(lambda: f"{pool.word()} {pool.word(kind='surname')}")
      occs = rng.sample(OCCUPATIONS, cfg.retry_decoys + 1)
      self.groups.append([self._person(name, title=f"{name} ({o})", disamb=o)
                          for o in occs])
    orgs = []
    for _ in range(cfg.num_orgs):
      k = rng.choice(ORG_KINDS)
      orgs.append(self._titled("org", self._name(lambda: f"{pool.word(kind='org')} {k}"), kind=k))
    for src in rng.sample(orgs, round(cfg.distractor_rate * len(orgs))):
      w = src.name.split()[0]
      try:
        name = self._name(lambda: f"{w} {rng.choice([k for k in ORG_KINDS if k != src.kind])}")
      except RuntimeError:
        if not cfg.name_classes:
          raise
        continue      # every other kind of group has this word already (a small org stock)
      twins.append((src, self._titled("org", name, kind=name.split()[-1])))
    works = []
    for _ in range(cfg.num_works):
      name = self._name(lambda: f"{pool.word(kind='work')} {pool.word(kind='work_2')}")
      works.append(self._titled("work", name, kind=rng.choice(WORK_KINDS)))
    for src in rng.sample(works, round(cfg.distractor_rate * len(works))):
      w = src.name.split()[0]
      name = self._name(lambda: f"{w} {pool.word(kind='work_2')}")
      twins.append((src, self._titled("work", name, kind=rng.choice(WORK_KINDS))))

    all_people = [e for e in self.entities if e.etype == "person"]
    all_orgs = [e for e in self.entities if e.etype == "org"]
    for e in self.entities:
      if e.etype == "person":
        e.facts = {"occupation": e.disamb or rng.choice(OCCUPATIONS), "birth_year": self._year("person"),
                   "born_in": rng.choice(places).id, "works_for": rng.choice(all_orgs).id}
      elif e.etype == "place":
        e.facts = {"place_year": self._year("place"), "known_for": rng.choice(PRODUCTS)}
      elif e.etype == "org":
        e.facts = {"org_year": self._year("org"), "based_in": rng.choice(places).id,
                   "founder": rng.choice(all_people).id}
      else:
        e.facts = {"work_year": self._year("work"), "creator": rng.choice(all_people).id,
                   "set_in": rng.choice(places).id}
    for group in self.groups:  # namesakes must differ on what retry questions ask
      for rel in RETRY_RELATIONS:
        if rel == "birth_year":
          vals = rng.sample(range(*YEAR_RANGES["person"]), len(group))
          vals = [str(v) for v in vals]
        else:
          pool_ids = [x.id for x in (places if rel == "born_in" else all_orgs)]
          vals = rng.sample(pool_ids, len(group))
        for member, v in zip(group, vals):
          member.facts[rel] = v
    for src, twin in twins:  # near-name twins share one attribute with their source
      shared = rng.choice([r.name for r in RELATIONS_OF[src.etype]])
      twin.facts[shared] = src.facts[shared]

  # -- passages ---------------------------------------------------------------------------
  def display(self, rel: Relation, value: str) -> str:
    return self.by_id[value].name if rel.obj != "attr" else value

  def _fact_sentence(self, e: Entity, rel: Relation) -> str:
    tpl = self.rng.choice(rel.state[:self.cfg.paraphrases])
    return tpl.format(s=e.name, o=self.display(rel, e.facts[rel.name]), kind=e.kind or "work")

  def build_passages(self) -> None:
    cfg, rng = self.cfg, self.rng
    for e in self.entities:
      rels = list(RELATIONS_OF[e.etype])
      rng.shuffle(rels)
      for start in range(0, len(rels), cfg.facts_per_passage):
        chunk = rels[start:start + cfg.facts_per_passage]
        sents = [self._fact_sentence(e, r) for r in chunk]
        if rng.random() < cfg.mention_rate:
          tpl, otype = MENTIONS[e.etype]
          others = [o for o in self.entities if o.etype == otype and o.id != e.id]
          sents.append(tpl.format(s=e.name, o=rng.choice(others).name))
        fillers = list(FILLERS[e.etype])
        rng.shuffle(fillers)
        while sum(len(s.split()) for s in sents) < cfg.min_passage_words and fillers:
          sents.insert(rng.randint(1, len(sents)), fillers.pop().format(s=e.name))
        pid = f"w{self.wi}-{len(self.passages):05d}"
        text = " ".join(sents)
        self.passages.append({"id": pid, "title": e.title, "text": text,
                              "contents": join_contents(e.title, text)})
        self.pid_entity[pid] = e
        for r in chunk:
          self.fact_pid[(e.id, r.name)] = pid


class _QuestionMaker:
  """Turns one world's facts into question candidates of each type, filtered for leaks."""

  def __init__(self, wb: _WorldBuilder):
    self.wb, self.cfg = wb, wb.cfg
    self.rng = random.Random(f"ragjax-questions-{wb.cfg.seed}-{wb.wi}")
    self.namesakes = {e.id for g in wb.groups for e in g}
    self.passage_words = [norm_words(p["contents"]) for p in wb.passages]
    self.word_index: dict[str, set[int]] = {}
    for i, words in enumerate(self.passage_words):
      for w in words:
        self.word_index.setdefault(w, set()).add(i)

  def mention(self, e: Entity) -> str:
    return f"the {e.disamb} {e.name}" if e.disamb else e.name

  def qname(self, e: Entity) -> str:
    return f"{e.name} {e.disamb}" if e.disamb else e.name

  def answers(self, rel: Relation, value: str) -> tuple[str, ...]:
    if rel.obj != "attr":
      return self.wb.by_id[value].aliases
    if rel.values == "occupation":
      return (value, f"a {value}")
    return (value,)

  def hop(self, e: Entity, rel: Relation) -> dict:
    return {"query": rel.query.format(s=self.qname(e)),
            "answer": self.wb.display(rel, e.facts[rel.name]),
            "passage_ids": [self.wb.fact_pid[(e.id, rel.name)]],
            "entity": e.title, "relation": rel.name}

  def pick(self, templates: tuple[str, ...]) -> str:
    return self.rng.choice(templates[:self.cfg.paraphrases])

  # Each candidate is (key, make) with make() -> (question, answers, hops, extra) or None.
  def one_hop(self) -> list:
    out = []
    for e in self.wb.entities:
      if e.id in self.namesakes:
        continue
      for rel in RELATIONS_OF[e.etype]:
        out.append((("1hop", e.id, rel.name), lambda e=e, rel=rel: (
            self.pick(rel.ask).format(s=self.mention(e)), self.answers(rel, e.facts[rel.name]),
            [self.hop(e, rel)], {})))
    return out

  def chains(self) -> list[list[tuple[Entity, Relation]]]:
    """Bridge paths [(e0, r0), (e1, r1), ...]: r0..r_{n-2} lead to the next entity, all
    entities distinct, 2 <= n <= max_hops."""
    out = []

    def grow(path):
      e, rel = path[-1]
      nxt = self.wb.by_id[e.facts[rel.name]]
      if nxt.id in {x.id for x, _ in path}:
        return
      for r in RELATIONS_OF[nxt.etype]:
        step = path + [(nxt, r)]
        if not (r.name == "occupation" and nxt.id in self.namesakes):
          out.append(step)  # the occupation would be in the namesake's refined query
        if r.obj != "attr" and len(step) < self.cfg.max_hops:
          grow(step)

    if self.cfg.max_hops >= 2:
      for e in self.wb.entities:
        if e.id not in self.namesakes:
          for rel in RELATIONS_OF[e.etype]:
            if rel.obj != "attr":
              grow([(e, rel)])
    return out

  def multi_hop(self) -> list:
    out = []
    for chain in self.chains():
      key = ("2hop",) + tuple(f"{e.id}:{r.name}" for e, r in chain)

      def make(chain=chain):
        s = self.mention(chain[0][0])
        for _, rel in chain[:-1]:
          s = self.pick(rel.describe).format(s=s)
        e_last, r_last = chain[-1]
        return (self.pick(r_last.ask).format(s=s), self.answers(r_last, e_last.facts[r_last.name]),
                [self.hop(e, r) for e, r in chain], {})
      out.append((key, make))
    return out

  def comparison(self) -> list:
    out = []
    for spec in COMPARISONS:
      rel = RELATIONS[spec.relation]
      ents = [e for e in self.wb.entities if e.etype == spec.subj and e.id not in self.namesakes]
      same, diff = [], []
      for a, b in itertools.combinations(ents, 2):
        va, vb = a.facts[rel.name], b.facts[rel.name]
        if spec.kind == "before" and va == vb:
          continue
        (same if va == vb else diff).append((a, b))
      if spec.kind == "same":  # balance yes/no: alternate same-value and different-value pairs
        self.rng.shuffle(same)
        self.rng.shuffle(diff)
        pairs = [p for pair in itertools.zip_longest(same, diff[:len(same)]) for p in pair if p]
      else:
        pairs = diff
      for a, b in pairs:
        def make(a=a, b=b, spec=spec, rel=rel):
          if self.rng.random() < 0.5:
            a, b = b, a
          va, vb = a.facts[rel.name], b.facts[rel.name]
          yes = va == vb if spec.kind == "same" else int(va) < int(vb)
          q = self.pick(spec.ask).format(a=self.mention(a), b=self.mention(b))
          return q, ("yes" if yes else "no",), [self.hop(a, rel), self.hop(b, rel)], {"comparison": spec.name}
        out.append((("comparison", spec.name, a.id, b.id), make))
    return out

  def retry(self) -> list:
    out = []
    for group in self.wb.groups:
      for e in group:
        for rname in RETRY_RELATIONS:
          rel = RELATIONS[rname]

          def make(e=e, rel=rel, group=group):
            decoys = [d for d in group if d is not e]
            extra = {"first_query": rel.query.format(s=e.name),
                     "decoy_passage_ids": [self.wb.fact_pid[(d.id, rel.name)] for d in decoys],
                     "decoy_answers": [self.wb.display(rel, d.facts[rel.name]) for d in decoys]}
            return (self.pick(rel.ask).format(s=self.mention(e)), self.answers(rel, e.facts[rel.name]),
                    [self.hop(e, rel)], extra)
          out.append((("retry", e.id, rname), make))
    return out

  def leaks(self, qtype: str, question: str, answers, hops) -> bool:
    """True if an answer alias is in the question, or one passage answers a bridge question."""
    qw = norm_words(question)
    if any(contains_words(qw, norm_words(a)) for a in answers):
      return True
    if qtype == "2hop":
      topic = norm_words(self.wb.pid_entity[hops[0]["passage_ids"][0]].name)
      final = norm_words(answers[0])
      for i in self.word_index.get(topic[0], set()) & self.word_index.get(final[0], set()):
        words = self.passage_words[i]
        if contains_words(words, topic) and contains_words(words, final):
          return True
    return False

  def candidates(self, qtype: str) -> list:
    cands = {"1hop": self.one_hop, "2hop": self.multi_hop, "comparison": self.comparison,
             "retry": self.retry}[qtype]()
    self.rng.shuffle(cands)
    return cands

  def take(self, qtype: str, counts: list[int]) -> list[list[tuple]]:
    """Fills each bucket in `counts` with distinct, leak-free questions of `qtype`."""
    buckets: list[list[tuple]] = [[] for _ in counts]
    seen = set()
    it = iter(self.candidates(qtype))
    for bucket, n in zip(buckets, counts):
      while len(bucket) < n:
        item = next(it, None)
        if item is None:
          raise ValueError(
              f"world {self.wb.wi}: only {sum(map(len, buckets))} '{qtype}' questions possible, "
              f"{sum(counts)} requested; enlarge the world (num_people/num_works/retry_groups...) "
              f"or lower num_train/num_dev/num_test or the '{qtype}' weight")
        _, make = item
        q, answers, hops, extra = make()
        if q in seen or self.leaks(qtype, q, answers, hops):
          continue
        seen.add(q)
        bucket.append((qtype, q, answers, hops, extra))
    return buckets


def _split_counts(total: int, weights: dict[str, float]) -> dict[str, int]:
  """Largest-remainder rounding of total * weight, in QTYPES order."""
  wsum = sum(weights.values())
  raw = {q: total * weights.get(q, 0.0) / wsum for q in QTYPES}
  counts = {q: int(v) for q, v in raw.items()}
  for q in sorted(QTYPES, key=lambda q: -(raw[q] - counts[q]))[:total - sum(counts.values())]:
    counts[q] += 1
  return counts


def _to_examples(split: str, items: list[tuple]) -> list[Example]:
  """items: (world index, passage titles of that world, (qtype, q, answers, hops, extra))."""
  out = []
  for i, (wi, titles, (qtype, q, answers, hops, extra)) in enumerate(items):
    pids = [p for h in hops for p in h["passage_ids"]]
    meta = {"qtype": qtype, "world": wi, "num_hops": len(hops), "hops": hops, **extra}
    out.append(make_example(f"world {split} question {i}", id=f"{split}_{i}", question=q,
                            golden_answers=answers, data_source=DATA_SOURCE,
                            supporting_ids=list(dict.fromkeys(pids)),
                            supporting_titles=list(dict.fromkeys(titles[p] for p in pids)),
                            metadata=meta))
  return out


def generate_world(cfg: WorldConfig = WorldConfig()) -> World:
  """Builds worlds 0..K-1 (train; dev from world 0) and world K (test: new entities, facts)."""
  pool = NamePool(random.Random(f"ragjax-names-{cfg.seed}"), reserved=_reserved_words(),
                  lexicon=cfg.name_lexicon, classes=cfg.name_classes)
  weights = dict(cfg.qtype_weights)
  entities, passages, questions = [], [], {}
  k = cfg.train_worlds
  plan = [(wi, ("dev", "train") if wi == 0 else ("train",)) for wi in range(k)]
  plan += [(wi, ()) for wi in range(k, cfg.test_index)]       # drawn, not kept (name stock)
  plan += [(cfg.test_index, ("test",))]
  # Train questions are spread over the train worlds (the first takes the remainder).
  share = {wi: cfg.num_train // k + (cfg.num_train % k if wi == 0 else 0) for wi in range(k)}
  items = {s: [] for s in SPLITS}
  for wi, splits in plan:
    pool.start_world()
    wb = _WorldBuilder(cfg, wi, pool)
    wb.build_entities()
    if not splits:
      continue
    wb.build_passages()
    maker = _QuestionMaker(wb)
    titles = {p["id"]: p["title"] for p in wb.passages}
    totals = {s: share[wi] if s == "train" else getattr(cfg, f"num_{s}") for s in splits}
    per_split = {s: _split_counts(totals[s], weights) for s in splits}
    for qtype in QTYPES:
      for s, bucket in zip(splits, maker.take(qtype, [per_split[s][qtype] for s in splits])):
        items[s].extend((wi, titles, item) for item in bucket)
    entities += wb.entities
    passages += wb.passages
  for s in SPLITS:
    shuf = random.Random(f"ragjax-order-{cfg.seed}-{world_of_split(s, k, cfg.test_index)}")
    shuf.shuffle(items[s])
    questions[s] = _to_examples(s, items[s])
  return World(config=cfg, entities=entities, passages=passages,
               questions={s: questions[s] for s in SPLITS})


def write_flashrag(world: World, out_dir: str) -> dict[str, str]:
  """Writes corpus.jsonl ({id, title, text, contents}) and {train,dev,test}.jsonl (FlashRAG
  question records).  Returns {'corpus': path, split: path}."""
  os.makedirs(out_dir, exist_ok=True)
  paths = {"corpus": os.path.join(out_dir, "corpus.jsonl")}
  write_jsonl(paths["corpus"], world.passages)
  for split, exs in world.questions.items():
    paths[split] = os.path.join(out_dir, f"{split}.jsonl")
    write_jsonl(paths[split], (e.to_flashrag() for e in exs))
  return paths
