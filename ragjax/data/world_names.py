"""Made-up names from syllables, so no pretrained model knows the world's facts.

One `NamePool` is shared by the train and test worlds.  By default every word it hands out is
new, which makes the test world's entities disjoint from the training worlds' down to single
name words.  With a `lexicon` it draws from a fixed list of name words instead (no word twice
within one world), as real names come from a shared stock of given names and surnames: the
test world's entities and facts are still new, but their name words are tokens the policy has
read, so a small policy can copy them (see `WorldConfig.name_lexicon`).
"""

from __future__ import annotations

import random

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "kr", "tr", "st", "sh")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "l", "r", "s", "m")


class NamePool:
  """Hands out capitalised syllable words.

  `reserved` holds lower-case words that must never appear (template vocabulary), so a name
  can never be confused with the surrounding language.  `lexicon` > 0: draw from that many
  fixed 2-syllable words, no word twice between `start_world()` calls; 0: every word is new.
  The lexicon has two halves, `slot` 0 for a name's first word and 1 for its second, so a
  policy that has copied a given name can tell which word of the question is the surname
  (a copy by word class; a shared stock would need an induction head, see bench.copy_task).
  """

  def __init__(self, rng: random.Random, reserved: frozenset[str] = frozenset(),
               lexicon: int = 0):
    self._rng = rng
    self._used: set[str] = set(reserved)
    words = [self._new_word(2, 2) for _ in range(lexicon)]
    self._lexicon: tuple[list[str], ...] = (words[:(lexicon + 1) // 2], words[(lexicon + 1) // 2:])
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

  def word(self, min_syl: int = 2, max_syl: int = 2, slot: int = 0) -> str:
    if not self.lexicon:
      return self._new_word(min_syl, max_syl)
    free = [w for w in self._lexicon[slot] if w not in self._in_world]
    if not free:
      raise RuntimeError(f"name lexicon slot {slot} ({len(self._lexicon[slot])} words) exhausted "
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
    return tuple(self._lexicon[0] + self._lexicon[1])

  @property
  def used(self) -> frozenset[str]:
    return frozenset(self._used)
