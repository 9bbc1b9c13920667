"""A random decoder with a planted Search-R1 grammar, so that greedy decoding searches every turn.

A random-weight model never writes `</search>`, so a multi-turn rollout benchmark on random
weights would measure one turn and no retrieval.  Training a policy to search costs more than a
benchmark may spend, so this module plants the protocol into random weights instead: every
turn the model writes

    <think> w1 ... wn </think><search> q1 ... qm </search>

with think_min <= n <= think_max and query_min <= m <= query_max, after which the Search-R1
stop string ends the turn and the loop appends the documents.  Which words, how many, and so
which documents come back depend on the question and on the documents read so far, so rows
and turns differ as in a real rollout.

How.  The first hidden dimensions are set aside as three *lanes* that the random layers neither
read (their q/k/v and gate/up rows there are zero) nor write (their o and down columns there
are zero), so what is put in a lane reaches the final norm untouched:

* grammar lane (one dimension per grammar state): a grammar token's embedding holds
  `lane_scale` in its state's dimension, and the untied unembedding gives every token `boost`
  in the dimensions of the states it may follow.  The margin is far above every other logit
  term, so the grammar decides which *set* of tokens comes next;
* word lane (`context_dims`): every token outside the protocol's fixed text (the instruction,
  tags, document framing) has a random vector here, the rest zero;
* context lane (`context_dims`): one planted attention group of layer 0 (query weights zero,
  so it attends uniformly to the row's whole history) copies the mean of the word lane here,
  a bag of the question's, documents' and generated words.  The unembedding reads it with
  random weights, so the random draw among a set's candidates (and whether a thought ends
  now: the closing tag competes with the next word on equal terms) is a function of the
  row's context.

The compute is that of any decoder of this shape (dense matmuls do not skip zeros); only the
unembedding is untied, which adds vocab x hidden parameters to tied presets.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import jax
import numpy as np

from ragjax.models.model_config import DecoderConfig

THINK_OPEN, THINK_CLOSE, SEARCH_OPEN, SEARCH_CLOSE = "<think>", "</think>", "<search>", "</search>"

# Layer weights that read the residual stream (lane rows zeroed) and write it (lane columns).
_READS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_WRITES = ("o_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class Grammar:
  """One turn's shape: think words in [think_min, think_max], query words in [query_min,
  query_max], `*_choices` candidate tokens per position.  `lane_scale` x `boost` is the
  grammar's logit margin; `word_scale` and `context_scale` size the context's logit term
  (spread ~2 at the defaults, against a margin of ~50 and random-layer terms of ~0.2)."""
  think_min: int = 16
  think_max: int = 48
  think_choices: int = 6
  query_min: int = 2
  query_max: int = 4
  query_choices: int = 24
  context_dims: int = 16
  lane_scale: float = 4.0
  boost: float = 4.0
  word_scale: float = 1.0
  context_scale: float = 1.0

  def __post_init__(self):
    if not 1 <= self.think_min <= self.think_max:
      raise ValueError(f"need 1 <= think_min <= think_max, got {self.think_min}, {self.think_max}")
    if not 1 <= self.query_min <= self.query_max:
      raise ValueError(f"need 1 <= query_min <= query_max, got {self.query_min}, {self.query_max}")
    if self.think_choices < 1 or self.query_choices < 1 or self.context_dims < 1:
      raise ValueError("think_choices, query_choices and context_dims must be >= 1")

  @property
  def num_states(self) -> int:
    """start, <think>, think_max word positions, </think>, <search>, query_max positions."""
    return 4 + self.think_max + self.query_max

  @property
  def lane_dims(self) -> int:
    return self.num_states + 2 * self.context_dims

  @property
  def max_turn_tokens(self) -> int:
    """<think> + words + </think> + <search> + words + </search>."""
    return 4 + self.think_max + self.query_max


@dataclasses.dataclass(frozen=True)
class GrammarTable:
  """token_state [V] (-1: outside the grammar), follows [F, V] (1: the token may follow the
  state), and the token ids that get no word vector (the protocol's fixed text)."""
  token_state: np.ndarray
  follows: np.ndarray
  fixed_text_ids: tuple[int, ...]


def single_token(tokenizer, text: str) -> int:
  ids = tokenizer(text, add_special_tokens=False)["input_ids"]
  if len(ids) != 1:
    raise ValueError(f"the planted grammar needs {text!r} to be one token; the tokenizer gives "
                     f"{ids} (add the protocol tags as added tokens)")
  return ids[0]


def word_tokens(tokenizer, vocab_size: int, min_len: int) -> list[int]:
  """Ids of whole words (` word`, >= min_len letters) that encode back to themselves, so a
  generated word re-tokenises to the same id (the transformers loop re-tokenises)."""
  out = []
  for piece, idx in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
    if idx >= vocab_size:
      continue
    word = tokenizer.convert_tokens_to_string([piece])
    if not re.fullmatch(rf" [A-Za-z]{{{min_len},}}", word):
      continue
    if tokenizer(word, add_special_tokens=False)["input_ids"] == [idx]:
      out.append(idx)
  return out


def grammar_table(tokenizer, vocab_size: int, grammar: Grammar, start_ids: Sequence[int],
                  fixed_text_ids: Sequence[int] = (), seed: int = 0) -> GrammarTable:
  """The planted grammar over this tokenizer.  `start_ids`: the tokens a turn starts after
  (the prompt's and the observation's last tokens); `fixed_text_ids`: tokens of the
  protocol's fixed text (no word vector).  Words are drawn from the vocabulary."""
  g = grammar
  tags = [single_token(tokenizer, t) for t in (THINK_OPEN, THINK_CLOSE, SEARCH_OPEN, SEARCH_CLOSE)]
  t_open, t_close, s_open, s_close = tags
  rng = np.random.default_rng(seed)
  reserved = set(tags) | set(start_ids)

  def draw(min_len: int, count: int, what: str) -> list[int]:
    pool = [i for i in word_tokens(tokenizer, vocab_size, min_len) if i not in reserved]
    if len(pool) < count:
      raise ValueError(f"the tokenizer has {len(pool)} free whole-word tokens of {min_len}+ "
                       f"letters; the grammar needs {count} {what} words (lower {what}_max or "
                       f"{what}_choices)")
    words = [int(x) for x in rng.choice(pool, count, replace=False)]
    reserved.update(words)
    return words

  query = draw(4, g.query_max * g.query_choices, "query")     # BM25 drops short words
  think = draw(1, g.think_max * g.think_choices, "think")

  state = np.full((vocab_size,), -1, np.int32)
  follows = np.zeros((g.num_states, vocab_size), np.float32)
  s_tclose, s_sopen = 2 + g.think_max, 3 + g.think_max   # 0: start, 1: after <think>
  state[list(start_ids)] = 0
  state[t_open], state[t_close], state[s_open] = 1, s_tclose, s_sopen
  follows[0, t_open] = 1
  follows[s_tclose, s_open] = 1

  def words_between(opener: int, first: int, words, choices: int, min_words: int, close: int):
    """opener -> w1 -> ... -> wn -> close, min_words <= n <= len(words) / choices; word i is
    one of its `choices` candidates and puts the row in state first + i."""
    prev = opener
    for i in range(len(words) // choices):
      ids = words[i * choices:(i + 1) * choices]
      follows[prev, ids] = 1
      prev = first + i
      state[ids] = prev
      if i + 1 >= min_words:
        follows[prev, close] = 1

  words_between(1, 2, think, g.think_choices, g.think_min, t_close)
  words_between(s_sopen, 4 + g.think_max, query, g.query_choices, g.query_min, s_close)
  fixed = sorted(set(int(i) for i in fixed_text_ids) | set(tags) | set(start_ids))
  return GrammarTable(state, follows, tuple(fixed))


def _path_names(path) -> list[str]:
  return [str(getattr(k, "key", getattr(k, "name", k))) for k in path]


def plant(cfg: DecoderConfig, params, table: GrammarTable, grammar: Grammar, seed: int = 0):
  """(untied cfg, host params): `params` with the grammar planted (see the module docstring)."""
  g = grammar
  f, k = g.num_states, g.context_dims
  lanes = g.lane_dims
  groups = cfg.num_kv_heads
  if lanes * 2 > cfg.hidden_size:
    raise ValueError(f"the planted grammar needs {lanes} lane dimensions, more than half of "
                     f"hidden_size {cfg.hidden_size}; use a smaller grammar (think_max)")
  if groups < 2 or k > cfg.head_dim:
    raise ValueError(f"the context head needs >= 2 KV heads and head_dim >= context_dims "
                     f"({cfg.num_kv_heads} KV heads, head_dim {cfg.head_dim}, {k} dims)")
  rng = np.random.default_rng(seed)
  params = jax.tree.map(np.array, jax.device_get(params))
  if cfg.tie_word_embeddings:
    params["lm_head"] = {"kernel": np.ascontiguousarray(params["embed_tokens"]["embedding"].T)}
  cfg = cfg.replace(tie_word_embeddings=False)

  def isolate(path, x):
    """Random layers neither read nor write the lanes."""
    names = _path_names(path)
    if names[-1] == "kernel" and any(n in _READS for n in names):
      axis = x.ndim - 3 if names[-2] in ("q_proj", "k_proj", "v_proj") else x.ndim - 2
      idx = [slice(None)] * x.ndim
      idx[axis] = slice(0, lanes)
      x[tuple(idx)] = 0
    elif any(n in _WRITES for n in names) and names[-1] in ("kernel", "bias"):
      x[..., :lanes] = 0
    return x

  params = jax.tree_util.tree_map_with_path(isolate, params)
  v = cfg.vocab_size
  emb = params["embed_tokens"]["embedding"]
  emb[:, :lanes] = 0
  planted = np.flatnonzero(table.token_state >= 0)
  emb[planted, table.token_state[planted]] = g.lane_scale
  words = np.ones((v,), bool)
  words[list(table.fixed_text_ids)] = False
  emb[words, f:f + k] = g.word_scale * rng.standard_normal((int(words.sum()), k))

  # Layer 0, KV group 0: uniform attention (zero queries and keys) over the word lane, written
  # to the context lane.  Heads of other groups stay random.
  if "layers_0" in params:
    attn, at = params["layers_0"]["self_attn"], ()
  else:                                                     # scanned layers: [L, ...] leaves
    attn, at = params["layers"]["layer"]["self_attn"], (0,)
  per_group = cfg.num_heads // groups
  heads = slice(0, per_group)
  for name, hs in (("q_proj", heads), ("k_proj", slice(0, 1))):
    attn[name]["kernel"][at + (slice(None), hs)] = 0
    if "bias" in attn[name]:
      attn[name]["bias"][at + (hs,)] = 0
  vk = attn["v_proj"]["kernel"]
  vk[at + (slice(None), 0)] = 0
  vk[at + (np.arange(f, f + k), 0, np.arange(k))] = 1.0
  if "bias" in attn["v_proj"]:
    attn["v_proj"]["bias"][at + (0,)] = 0
  ok = attn["o_proj"]["kernel"]
  ok[at + (heads,)] = 0
  for h in range(per_group):
    ok[at + (h, np.arange(k), np.arange(f + k, f + 2 * k))] = 1.0 / per_group

  head = params["lm_head"]["kernel"]
  head[:lanes, :] = 0
  head[:f, :] = g.boost * table.follows[:, :v]
  head[f + k:lanes, :] = g.context_scale * rng.standard_normal((k, v))
  return cfg, params
