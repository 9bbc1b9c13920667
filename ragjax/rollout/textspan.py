"""Character positions in a generated turn <-> token counts, without re-tokenising.

Parsers work on decoded text; cuts must land on token boundaries of the sampler's ids.  Byte-level
BPE can split a character across tokens, so we search on decoded prefixes instead of summing
per-token strings.
"""

from __future__ import annotations

from typing import Sequence


def decode(tokenizer, ids: Sequence[int]) -> str:
  """Decoding that keeps special tokens and spacing, so offsets match what the model saw."""
  return tokenizer.decode(list(ids), skip_special_tokens=False,
                          clean_up_tokenization_spaces=False)


def tokens_covering(tokenizer, ids: Sequence[int], text: str, n_chars: int) -> int:
  """The fewest leading tokens of `ids` whose decoding contains `text[:n_chars]`."""
  if n_chars <= 0:
    return 0
  target = text[:n_chars]
  lo, hi = 1, len(ids)
  while lo < hi:                                  # decode(ids[:k]).startswith(target) is monotone
    mid = (lo + hi) // 2
    if decode(tokenizer, ids[:mid]).startswith(target):
      hi = mid
    else:
      lo = mid + 1
  return lo


def tokens_within(tokenizer, ids: Sequence[int], text: str, n_chars: int) -> int:
  """The most leading tokens of `ids` whose decoding stays inside `text[:n_chars]`."""
  target = text[:n_chars]
  k = tokens_covering(tokenizer, ids, text, n_chars)
  while k > 0 and not target.startswith(decode(tokenizer, ids[:k])):
    k -= 1
  return k
