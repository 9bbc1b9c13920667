"""Made-up names from syllables, so no pretrained model knows the world's facts.

One `NamePool` is shared by the train and test worlds.  By default every word it hands out is
new, which makes the test world's entities disjoint from the training worlds' down to single
name words.  With a `lexicon` it draws from a fixed list of name words instead (no word twice
within one world), as real names come from a shared stock of given names and surnames: the
test world's entities and facts are still new, but their name words are tokens the policy has
read, so a small policy can copy them (see `WorldConfig.name_lexicon`).  With `classes` the
stock is split by the kind of name (given names, surnames, towns, groups, works' two words), as
real names are told apart by their form: a town's word is never a person's, so a policy can
find a passage's town by its kind of word (see `WorldConfig.name_classes`).
"""

from __future__ import annotations

import random

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "kr", "tr", "st", "sh")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "l", "r", "s", "m")

# The kinds of name word (`NamePool.word(kind=...)`).  Without classes the stock has two halves,
# first words and second words, and each kind draws from its half (SLOTS); with classes each
# kind has its own share of the stock (CLASS_SHARES, in this order; the last takes the rest).
SLOTS = {"given": 0, "surname": 1, "place": 0, "org": 0, "work": 0, "work_2": 1}
CLASS_SHARES = (("given", 0.19), ("surname", 0.19), ("place", 0.14), ("org", 0.24),
                ("work", 0.12), ("work_2", 0.12))


class NamePool:
  """Hands out capitalised syllable words.

  `reserved` holds lower-case words that must never appear (template vocabulary), so a name
  can never be confused with the surrounding language.  `lexicon` > 0: draw from that many
  fixed 2-syllable words, no word twice between `start_world()` calls; 0: every word is new.
  The lexicon has two halves, one for a name's first word and one for its second (`SLOTS`), so
  a policy that has copied a given name can tell which word of the question is the surname
  (a copy by word class; a shared stock would need an induction head, see bench.copy_task).
  `classes`: one part of the lexicon per kind of name instead (`CLASS_SHARES`).
  """

  def __init__(self, rng: random.Random, reserved: frozenset[str] = frozenset(),
               lexicon: int = 0, classes: bool = False):
    self._rng = rng
    self._used: set[str] = set(reserved)
    words = [self._new_word(2, 2) for _ in range(lexicon)]
    if classes:
      self._lexicon: dict = {}
      start = 0
      for i, (kind, share) in enumerate(CLASS_SHARES):
        end = lexicon if i == len(CLASS_SHARES) - 1 else start + round(share * lexicon)
        self._lexicon[kind], start = words[start:end], end
    else:
      half = (words[:(lexicon + 1) // 2], words[(lexicon + 1) // 2:])
      self._lexicon = {kind: half[slot] for kind, slot in SLOTS.items()}
    self._in_world: set[str] = set()
    self._names: set[str] = set()

  def _new_word(self, min_syl: int, max_syl: int) -> str:
    for _ in range(10_000):
      n = self._rng.randint(min_syl, max_syl)
      parts = [self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(n)]
      parts[-1] += self._rng.choice(_CODAS)
      w = "".join(parts)
      if w not in self._used:
        self._used.add(w)
        return w.capitalize()
    raise RuntimeError("name space exhausted; use fewer entities")

  def start_world(self) -> None:
    """A new world may reuse the lexicon's words (no-op without a lexicon)."""
    self._in_world.clear()

  def word(self, min_syl: int = 2, max_syl: int = 2, kind: str = "given") -> str:
    """A name word of `kind` (a key of `SLOTS`): new, or from the lexicon's part for it."""
    if kind not in SLOTS:
      raise ValueError(f"unknown kind of name word {kind!r}; use one of {sorted(SLOTS)}")
    if not self.lexicon:
      return self._new_word(min_syl, max_syl)
    part = self._lexicon[kind]
    free = [w for w in part if w not in self._in_world]
    if not free:
      raise RuntimeError(f"name lexicon part for {kind} words ({len(part)} words) exhausted "
                         "within one world; raise name_lexicon or use fewer entities")
    w = self._rng.choice(free)
    self._in_world.add(w)
    return w

  def claim(self, name: str) -> bool:
    """Registers a full name; False if any world already has it (only possible with a
    lexicon, where words repeat across worlds and so could whole names)."""
    if name in self._names:
      return False
    self._names.add(name)
    return True

  @property
  def lexicon(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w for part in self._lexicon.values() for w in part))

  @property
  def used(self) -> frozenset[str]:
    return frozenset(self._used)
