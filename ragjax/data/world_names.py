"""Made-up names from syllables, so no pretrained model knows the world's facts.

One `NamePool` is shared by the train and test worlds: every word it hands out is new, which
makes the test world's entities disjoint from the training world's down to single name words.
"""

from __future__ import annotations

import random

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "kr", "tr", "st", "sh")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "l", "r", "s", "m")


class NamePool:
  """Hands out capitalised syllable words that were never handed out before.

  `reserved` holds lower-case words that must never appear (template vocabulary), so a name
  can never be confused with the surrounding language.
  """

  def __init__(self, rng: random.Random, reserved: frozenset[str] = frozenset()):
    self._rng = rng
    self._used: set[str] = set(reserved)

  def word(self, min_syl: int = 2, max_syl: int = 2) -> str:
    for _ in range(10_000):
      n = self._rng.randint(min_syl, max_syl)
      parts = [self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(n)]
      parts[-1] += self._rng.choice(_CODAS)
      w = "".join(parts)
      if w not in self._used:
        self._used.add(w)
        return w.capitalize()
    raise RuntimeError("name space exhausted; use fewer entities")

  @property
  def used(self) -> frozenset[str]:
    return frozenset(self._used)
