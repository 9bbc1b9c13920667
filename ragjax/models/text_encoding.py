"""Text to ids through a tokenizer, with no BOS/EOS added: the plain encoding every package
shares (data such as retrieved passages is encoded plain, so special-token strings stay text)."""

from __future__ import annotations

from typing import Sequence


def encode_text(tokenizer, text: str, *, plain: bool = False) -> list[int]:
  """Ids of `text` with no BOS/EOS added.  Special-token strings map to their ids unless
  `plain`: data (retrieved passages, questions) is always tokenised plain, so a passage that
  contains `<|im_end|>` or `<|eot_id|>` cannot end the policy's turn."""
  if not text:
    return []
  return list(tokenizer(text, add_special_tokens=False, split_special_tokens=plain)["input_ids"])


def encode_texts(tokenizer, texts: Sequence[str], *, plain: bool = False) -> list[list[int]]:
  """`encode_text` of every text, in one batched tokenizer call (a fast tokenizer encodes the
  batch on several threads)."""
  out: list[list[int]] = [[] for _ in texts]
  live = [i for i, t in enumerate(texts) if t]
  if live:
    enc = tokenizer([texts[i] for i in live], add_special_tokens=False,
                    split_special_tokens=plain)["input_ids"]
    for i, ids in zip(live, enc):
      out[i] = list(ids)
  return out
