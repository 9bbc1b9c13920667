"""Labelled text segments and their tokenisation: the only place injected text becomes ids.

Generated spans never pass through here (they keep the sampler's ids).  Each segment is
tokenised on its own, so a label boundary is always a token boundary and the labels line up
with the ids by construction.  Retrieved text is data and is tokenised plain (special-token
strings in it stay text); environment and method text may carry the chat template's framing.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ragjax.models.text_encoding import encode_text
from ragjax.rollout.labels import Source


@dataclasses.dataclass(frozen=True)
class Segment:
  """Text the environment (or a method hook) appends, with its label.

  `max_tokens` truncates this segment's ids (observation budgets are counted in tokens of the
  retrieved text, so the closing wrapper tag always survives).  `budget`: this segment and
  every one after it in the same list keep at most this many tokens together (Search-R1's
  code cuts its whole observation string, tags included: `protocol.obs_cap="observation"`).
  `plain`: tokenise special-token strings as text (data); None means plain for retrieved text
  only.
  """
  text: str
  label: Source
  max_tokens: Optional[int] = None
  plain: Optional[bool] = None
  budget: Optional[int] = None

  @property
  def is_plain(self) -> bool:
    return self.label == Source.RETRIEVED if self.plain is None else bool(self.plain)


def tokenize_segments(tokenizer, segments: Sequence[Segment],
                      known: Optional[dict] = None) -> tuple[list[int], list[int], bool]:
  """(ids, labels, truncated) for the concatenation of `segments`.  `known`: ids already
  computed, by (text, plain) (`Renderer.prefetch`)."""
  ids: list[int] = []
  labels: list[int] = []
  truncated = False
  left = None                       # tokens the running `budget` still allows
  for seg in segments:
    if not isinstance(seg, Segment):
      raise TypeError(f"expected Segment, got {type(seg).__name__}: {seg!r}")
    piece = (known or {}).get((seg.text, seg.is_plain))
    if piece is None:
      piece = encode_text(tokenizer, seg.text, plain=seg.is_plain)
    if seg.max_tokens is not None and len(piece) > seg.max_tokens:
      piece = piece[: seg.max_tokens]
      truncated = True
    if seg.budget is not None:
      left = seg.budget
    if left is not None:
      if len(piece) > left:
        piece = piece[:left]
        truncated = True
      left -= len(piece)
    ids.extend(piece)
    labels.extend([int(seg.label)] * len(piece))
  return ids, labels, truncated
