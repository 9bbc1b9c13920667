"""A small byte-level BPE tokenizer for from-scratch policies, trained on the synthetic world.

Byte-level, so any text (test-world names, retrieved passages, user prompts) encodes without
unknown tokens; trained on the training worlds only (training passages, train/dev questions,
answers and hop queries), so test-world names are not merged into single tokens.  With
`syllables=True` every capitalised word is cut into its syllables before BPE, so a name the
policy never saw splits into the same pieces as the names it trained on (copying an unseen name
is then copying familiar tokens).  With `digit_pairs=True` numbers split into two-digit
pieces (" 1911" -> " 19", "11"), so every year is the same two kinds of token.

The protocol tags are added tokens (one id each, kept when decoding with
`skip_special_tokens=True`, since the rollout parser reads them); pad/bos/eos are special
tokens.  Training is deterministic: the
same `WorldConfig` (seed) gives a byte-identical `tokenizer.json`.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from ragjax.data.world import World, WorldConfig, generate_world

PROTOCOL_TAGS = ("<think>", "</think>", "<search>", "</search>", "<information>",
                 "</information>", "<answer>", "</answer>")
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)

# Plain role markers so `apply_chat_template` works for rollout code shared with chat models.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}")


_C, _V = "[b-df-hj-np-tv-xz]", "[aeiouy]"
# Pre-tokens: a syllable inside a capitalised word (consonants, vowels, and the word's final
# consonants), the first syllable of a capitalised word (with its leading space), or a whole
# lower-case word.  Lower-case words are consumed whole from their first letter, so the
# first alternative only ever fires inside capitalised words.  Anything else (digits,
# punctuation, spaces) is left to the byte-level splitter.
SYLLABLE_PATTERN = (f"(?<=[A-Za-z]){_C}*{_V}+(?:{_C}+(?![a-z]))?"
                    f"| ?[A-Z]{_C}*{_V}*(?:{_C}+(?![a-z]))?"
                    f"| ?[a-z]+")
DIGIT_PAIR_PATTERN = r" ?\d\d"
# With digit_pairs the trainer also reads every year 1000..2099 a few times, so all the pair
# pieces get merged even when the vocabulary runs out before rare years' pairs would.
_YEARS_TEXT = " ".join(str(y) for y in range(1000, 2100))


def world_training_texts(world: World) -> list[str]:
  """World-0 text only: passages, train/dev questions, answers and ideal hop queries."""
  texts = [p["contents"] for p in world.corpus("train")]
  for split in ("train", "dev"):
    for ex in world.questions[split]:
      texts.append(ex.question)
      texts.extend(ex.golden_answers)
      texts.extend(h["query"] for h in ex.metadata.get("hops", ()))
  return texts


def min_vocab_size(added_tokens: Sequence[str] = PROTOCOL_TAGS) -> int:
  """Special tokens, the 256 byte tokens and the added tags: a smaller vocabulary cannot hold them."""
  return len(SPECIAL_TOKENS) + 256 + len(added_tokens)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048,
                    added_tokens: Sequence[str] = PROTOCOL_TAGS,
                    min_frequency: int = 2, syllables: bool = False,
                    digit_pairs: bool = False):
  """Trains the BPE and wraps it as a transformers fast tokenizer of at most `vocab_size` ids
  (special tokens, bytes, merges, then `added_tokens`; a small corpus may run out of merges
  with `min_frequency` before the limit, so size the model's embedding with `len(tok)`).
  `syllables`: cut capitalised words into syllables first; `digit_pairs`: numbers into
  two-digit pieces, each a token for any year 1000..2099 (see the module docstring)."""
  from transformers import PreTrainedTokenizerFast  # pylint: disable=import-outside-toplevel
  n_merged = vocab_size - len(added_tokens)
  if vocab_size < min_vocab_size(added_tokens):
    raise ValueError(f"vocab_size {vocab_size} too small: need >= {min_vocab_size(added_tokens)}")
  tok = Tokenizer(models.BPE())
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
  splits = [pre_tokenizers.Split(Regex(pattern), "isolated") for pattern, on in
            ((DIGIT_PAIR_PATTERN, digit_pairs), (SYLLABLE_PATTERN, syllables)) if on]
  tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, byte_level]) if splits else byte_level
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=n_merged, min_frequency=min_frequency,
                                special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(texts) + ([_YEARS_TEXT] * 20 if digit_pairs else []),
                          trainer=trainer)
  tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added_tokens])
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                 pad_token=PAD, model_max_length=4096)
  fast.chat_template = CHAT_TEMPLATE
  return fast


def train_world_tokenizer(out_dir: Optional[str] = None, cfg: WorldConfig = WorldConfig(),
                          vocab_size: int = 2048, world: Optional[World] = None,
                          syllables: bool = False, digit_pairs: bool = False,
                          extra_tags: Sequence[str] = ()):
  """Trains on `generate_world(cfg)` and, if `out_dir` is given, saves a directory that
  `transformers.AutoTokenizer.from_pretrained(out_dir)` loads.  `extra_tags`: another
  protocol's tags, one added token each like the Search-R1 tags (UR²'s `<|begin_of_query|>`)."""
  world = world if world is not None else generate_world(cfg)
  fast = train_tokenizer(world_training_texts(world), vocab_size=vocab_size,
                         added_tokens=PROTOCOL_TAGS + tuple(extra_tags),
                         syllables=syllables, digit_pairs=digit_pairs)
  if out_dir is not None:
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
  return fast
