"""Hostile policy outputs, per protocol grammar: what `ragjax.tools.fuzz` makes a policy write.

A policy early in RL (or a broken checkpoint) writes anything: unclosed, nested, repeated and
mis-cased tags, actions split across turns, empty and 10,000-character queries, byte-level
tokens that are not valid UTF-8, another protocol's grammar, nothing but eos.  `row_script`
draws one row's turns from those kinds; an item is text, or a list of token ids (invalid
UTF-8, a lone eos) that `ragjax.rollout.teacher.TeacherPolicy` emits as they are.
"""

from __future__ import annotations

import random
from typing import Optional, Sequence, Union

Item = Union[str, list]

# The protocols' grammars: (open, close) pairs, a search maker and an answer maker.
TAGS = dict(pairs=[("<search>", "</search>"), ("<answer>", "</answer>"), ("<think>", "</think>"),
                   ("<refine>", "</refine>"), ("<information>", "</information>"),
                   ("<documents>", "</documents>")],
            search=lambda q, n: f"<think>I look it up.</think> <search>{q}</search>",
            answer=lambda a, n: f"<think>done</think> <answer>{a}</answer>")
UR2 = dict(pairs=[("<|begin_of_query|>", "<|end_of_query|>"),
                  ("<|begin_of_documents|>", "<|end_of_documents|>"), ("\\boxed{", "}"),
                  ("<answer>", "</answer>")],
           search=lambda q, n: f"Let me search. <|begin_of_query|>{q}<|end_of_query|>",
           answer=lambda a, n: f"So the answer is \\boxed{{{a}}}.")
R3 = dict(pairs=[("Step 1:\n", "\nStep"), ("The retrieval query: ", "\nThe retrieval documents: "),
                 ("The final answer: ", "\n")],
          search=lambda q, n: (f"Step {n}:\nThe problem analysis: I need a fact.\n"
                               f"The retrieval query: {q}"),
          answer=lambda a, n: (f"Step {n}:\nThe problem analysis: I have it.\n"
                               f"The final answer: {a}"))
GRAMMARS = {"tags": TAGS, "ur2": UR2, "r3_rag": R3}
FAMILY = {"search_r1": "tags", "rex_rag": "tags", "world": "tags", "autorefine": "tags",
          "rezero": "tags", "ur2": "ur2", "r3_rag": "r3_rag"}

KINDS = ("valid", "unclosed", "nested", "repeated", "miscased", "split", "empty_query",
         "long_query", "invalid_utf8", "foreign", "eos_only", "junk")
LONG = 10_000                        # characters of a long query or answer

# Bytes that are not valid UTF-8 where they stand: lone continuation bytes, overlong and
# out-of-range leads, and lead bytes cut before their continuation.
BAD_BYTES = ([0x80, 0x9F, 0xBF, 0xC0, 0xC1, 0xF5, 0xFE, 0xFF], [0xC3], [0xE2, 0x82],
             [0xF0, 0x9F, 0x98], [0xED, 0xA0, 0x80])
JUNK = ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eos|>", "<|pad|>", "<|bos|>",
        "\x00", "\x1b[31m", "\u202e", "\ufeff", "😀", "é", "\r\n", "\t", "}", "{", '"', "\\",
        "<", ">", "</", "<<search>>", "</search", "search>", "<answer", "Step", "\nStep"]


def family_of(protocol: str) -> str:
  return FAMILY.get(protocol, "tags")


def byte_alphabet() -> dict:
  """GPT-2's byte-level alphabet (what `tokenizers.pre_tokenizers.ByteLevel` uses): byte ->
  the printable character that stands for it."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
  out, extra = {}, 0
  for b in range(256):
    if b in keep:
      out[b] = chr(b)
    else:
      out[b] = chr(256 + extra)
      extra += 1
  return out


def byte_token_ids(tok) -> Optional[dict]:
  """{byte: token id} for a byte-level BPE (GPT-2's byte alphabet), else None."""
  out = {}
  for b, ch in byte_alphabet().items():
    i = tok.convert_tokens_to_ids(ch)
    if i is None or i == tok.unk_token_id:
      return None
    out[b] = int(i)
  return out


class Fuzzer:
  """Draws hostile turns for `protocol`.  `words`: text to build plausible queries from (the
  world's titles); `tok`: the policy's tokenizer (for eos and byte tokens)."""

  def __init__(self, protocol: str, tok, words: Sequence[str]):
    self.family = family_of(protocol)
    self.own = GRAMMARS[self.family]
    self.others = [g for f, g in GRAMMARS.items() if f != self.family]
    self.tok, self.words = tok, list(words) or ["Quillport"]
    self.eos = int(tok.eos_token_id)
    self.bytes = byte_token_ids(tok)

  def text(self, rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.6:
      return " ".join(rng.choice(self.words) for _ in range(rng.randint(1, 4)))
    if pick < 0.8:
      return "".join(rng.choice(JUNK) for _ in range(rng.randint(1, 4)))
    return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 6)))

  def action(self, rng: random.Random, grammar=None, n: int = 1) -> str:
    g = grammar or self.own
    return (g["search"] if rng.random() < 0.6 else g["answer"])(self.text(rng), n)

  def miscase(self, rng: random.Random, s: str) -> str:
    for o, c in self.own["pairs"]:
      f = rng.choice([str.upper, str.title, str.swapcase,
                      lambda x: "".join(ch.upper() if rng.random() < .5 else ch for ch in x)])
      s = s.replace(o, f(o)).replace(c, f(c))
    return s

  def bad_utf8(self, rng: random.Random) -> list:
    if self.bytes is None:
      raise ValueError("invalid UTF-8 needs a byte-level tokenizer")
    ids = self.tok(self.action(rng), add_special_tokens=False)["input_ids"]
    for _ in range(rng.randint(1, 4)):
      bad = rng.choice(BAD_BYTES)
      seq = [rng.choice(bad)] if len(bad) > 3 else bad
      at = rng.randint(0, len(ids))
      ids[at:at] = [self.bytes[b] for b in seq]
    return ids

  def item(self, rng: random.Random, kind: str, n: int) -> list:
    """The turns (one, two for "split") of one hostile output of `kind`."""
    own, o, c = self.own, *rng.choice(self.own["pairs"])
    if kind == "valid":
      return [self.action(rng, n=n)]
    if kind == "unclosed":
      return [rng.choice(["", self.text(rng) + " "]) + o + self.text(rng)]
    if kind == "nested":
      o2, c2 = rng.choice(own["pairs"])
      inner = rng.choice([self.action(rng, n=n), o2 + self.text(rng) + c2, o + self.text(rng) + c])
      return [o + inner + c]
    if kind == "repeated":
      k = rng.randint(2, 6)
      return [rng.choice(["".join(self.action(rng, n=n + i) for i in range(k)), o * k + self.text(rng) + c * k,
                          (o + self.text(rng) + c) * k])]
    if kind == "miscased":
      return [self.miscase(rng, self.action(rng, n=n))]
    if kind == "split":
      s = self.action(rng, n=n)
      at = rng.randint(1, len(s) - 1)
      return [s[:at], s[at:]]
    if kind == "empty_query":
      blank = rng.choice(["", " ", "\n", "\t \n", '""'])
      return [(own["search"] if rng.random() < 0.7 else own["answer"])(blank, n)]
    if kind == "long_query":
      body = "".join(rng.choice(self.words + ["x" * 50, " ", "😀"]) for _ in range(LONG // 5))
      return [(own["search"] if rng.random() < 0.7 else own["answer"])(body[:LONG], n)]
    if kind == "invalid_utf8":
      return [self.bad_utf8(rng)]
    if kind == "foreign":
      return [self.action(rng, rng.choice(self.others), n)]
    if kind == "eos_only":
      return [[self.eos]] if rng.random() < 0.7 else [self.tok.eos_token]
    if kind == "junk":
      return ["".join(rng.choice(JUNK + [self.text(rng)]) for _ in range(rng.randint(0, 8)))]
    raise ValueError(f"unknown output kind {kind!r}; known: {KINDS}")

  def row_script(self, rng: random.Random, kinds: Sequence[str] = KINDS
                 ) -> tuple[list, list]:
    """One row's turns and the kind of each: 1-6 hostile outputs (mostly one kind per row, so
    a row of valid searches reaches the later turns)."""
    items, labels = [], []
    main = rng.choice(kinds)
    for n in range(1, rng.randint(1, 6) + 1):
      kind = main if rng.random() < 0.6 else rng.choice(kinds)
      if kind == "invalid_utf8" and self.bytes is None:
        kind = "junk"
      for it in self.item(rng, kind, n):
        items.append(it)
        labels.append(kind)
    return items, labels
