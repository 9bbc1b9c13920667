"""Rollout test fixtures: a BPE tokenizer trained here, a real BM25 index over passages written
here, and a scripted policy with the sampler's API that emits forced token sequences."""

from __future__ import annotations

import functools

import numpy as np

from conftest import temp_dir
from ragjax.rollout.protocols import search_r1, autorefine, ur2, rezero
from ragjax.sampling.sampler_config import BUDGET, CACHE_FULL, EOS, NOT_RUN, STOP
from ragjax.sampling.state import TurnOutput
from ragjax.rollout.teacher import TeacherState

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

PASSAGES = [
    ("p0", "Zorbland", "Zorbland is a fictional island nation whose capital is Quillport."),
    ("p1", "Quillport", "Quillport is the capital and largest harbour city of Zorbland."),
    ("p2", "Mirela Dunst", "Mirela Dunst founded the Quillport Observatory in 1871."),
    ("p3", "Quillport Observatory", "The Quillport Observatory studies comets and tides."),
    ("p4", "Tessaly River", "The Tessaly River flows through Quillport into the Amber Sea."),
    ("p5", "Amber Sea", "The Amber Sea borders Zorbland to the south and east."),
    ("p6", "", ur2.FALLBACK),        # no title: contents is exactly the fallback sentence
    ("p7", "Long chronicle", " ".join(f"The chronicle of Zorbland lists harbour event number {i}."
                                      for i in range(80))),
]

_TRAIN_TEXT = [
    search_r1.SEARCH_R1_TEMPLATE, search_r1.LONG_INVALID_MESSAGE, autorefine.CODE_TEMPLATE,
    ur2.QA_RETRIEVAL, ur2.MATH_RETRIEVAL, ur2.MCQ_RETRIEVAL, ur2.FALLBACK_NOTICE,
    rezero.USER_TEMPLATE, rezero.SYSTEM_TEMPLATE,
    "Step 1:\nThe problem analysis: I need the capital.\nThe retrieval query: capital of Zorbland?"
    "\nThe retrieval documents: \nStep 2:\nThe final answer: Quillport",
    "<think> I should search. </think> <search> capital of Zorbland </search> "
    "<information> Doc 1(Title: Zorbland) </information> <documents> </documents> "
    "<refine> </refine> <answer> Quillport </answer> \\boxed{42} the correct answer is: B",
    "<|begin_of_query|> who founded the observatory <|end_of_query|> <|begin_of_documents|> "
    "<|end_of_documents|> Result 1:\n------\n",
] + [f"{t}\n{x}" for _, t, x in PASSAGES]


@functools.lru_cache(maxsize=None)
def tokenizer(chat: bool = True, vocab_size: int = 500):
  """A byte-level BPE trained here (no downloads), wrapped as a transformers fast tokenizer."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(_TRAIN_TEXT * 3, trainer)
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", bos_token=None)
  if chat:
    fast.chat_template = CHATML
  return fast


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
LLAMA3 = ("{{ '<|begin_of_text|>' }}{% for message in messages %}{{ '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
          "{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


@functools.lru_cache(maxsize=None)
def llama3_tokenizer():
  """A byte-level BPE with Llama-3's special tokens and chat template layout."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=LLAMA3_SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(_TRAIN_TEXT * 3, trainer)
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eot_id|>",
                                 bos_token="<|begin_of_text|>", pad_token="<|end_of_text|>")
  fast.chat_template = LLAMA3
  return fast


class StaticRetriever:
  """Returns the same passages for every query (a retriever whose corpus holds hostile text)."""

  def __init__(self, contents):
    from ragjax.retrieval.types import Hit
    self.hits = [Hit(f"s{i}", c, 1.0) for i, c in enumerate(contents)]

  def search(self, queries, k):
    return [list(self.hits[:k]) for _ in queries]


@functools.lru_cache(maxsize=None)
def bm25_retriever():
  """The retrieval package's real BM25 backend over PASSAGES (an Arrow store in a temp dir)."""
  from ragjax.retrieval.bm25 import BM25Index
  from ragjax.retrieval.types import Passage
  from ragjax.retrieval.retrievers import BM25Retriever
  from ragjax.retrieval.store import PassageStore, write_store
  d = temp_dir("rollout_bm25_")
  write_store([Passage(i, t, x) for i, t, x in PASSAGES], d)
  store = PassageStore(d)
  return BM25Retriever(store, BM25Index.build(store.contents()))


class CountingRetriever:
  """Wraps a real retriever and records every call (to assert one call per turn)."""

  def __init__(self, inner):
    self.inner, self.calls = inner, []

  def search(self, queries, k):
    self.calls.append((list(queries), k))
    return self.inner.search(queries, k)


# The teacher policy's state has exactly the fields a scripted policy needs.
ScriptState = TeacherState


def slot_logprob(slot: int) -> float:
  """The scripted log-prob of a token generated at cache slot `slot` (alignment check)."""
  return -(slot + 1) / 1000.0


class ScriptedPolicy:
  """A `ragjax.rollout.policy.Policy` over forced text: row r emits `scripts[r][i]` on its
  i-th decode (text, or a list of token ids: byte-level pieces that need not be valid UTF-8).  Like the real sampler it stops right after the token that completes a stop
  string, on eos, at the per-turn budget, or when the cache is full."""

  def __init__(self, tok, scripts: dict, stop_strings=(), max_new_tokens: int = 64,
               cache_length: int = 4096):
    self.tok, self.scripts = tok, scripts
    self.stop_strings = tuple(stop_strings)
    self.max_new_tokens, self.cache_length = max_new_tokens, cache_length
    self.eos_ids = (tok.eos_token_id,)
    # a small extend limit makes long observations go in several extend calls, as with the
    # real sampler's buckets
    self.max_extend = 64
    self.calls = {"prefill": 0, "decode": 0, "extend": 0, "set_done": 0, "clone_rows": 0,
                  "truncate": 0}

  def set_params(self, params):
    """Scripted text has no weights."""

  def prefill(self, prompts, samples_per_prompt=1, seed=0, first_row=0):
    self.calls["prefill"] += 1
    hist = [list(p) for p in prompts for _ in range(samples_per_prompt)]
    self.state = ScriptState(hist, np.zeros(len(hist), bool), [0] * len(hist), self.cache_length)
    return self.state

  def decode(self, state):
    self.calls["decode"] += 1
    b, m = state.batch_size, self.max_new_tokens
    toks = np.zeros((b, m), np.int32)
    lps = np.zeros((b, m), np.float32)
    lens = np.zeros(b, np.int32)
    reason = np.full(b, NOT_RUN, np.int32)
    for r in range(b):
      if state.finished[r]:
        continue
      script = self.scripts.get(r, [])
      text = script[state.cursor[r]] if state.cursor[r] < len(script) else self.tok.eos_token
      state.cursor[r] += 1
      ids = (list(text) if isinstance(text, list)
             else self.tok(text, add_special_tokens=False)["input_ids"])
      out, why = [], BUDGET     # a script that ends without a stop reads as a spent budget
      for tid in ids:
        if len(state.histories[r]) >= state.cache_length:
          why = CACHE_FULL
          break
        if len(out) >= m:
          break
        lps[r, len(out)] = slot_logprob(len(state.histories[r]))
        out.append(tid)
        state.histories[r].append(tid)
        if tid in self.eos_ids:
          why = EOS
          break
        turn = self.tok.decode(out, skip_special_tokens=False)
        if any(s in turn for s in self.stop_strings):
          why = STOP
          break
      toks[r, :len(out)] = out
      lens[r] = len(out)
      reason[r] = why
      if why in (EOS, CACHE_FULL):
        state.finished[r] = True
    return state, TurnOutput(tokens=toks, lengths=lens, logprobs=lps, sampling_logprobs=lps,
                             stop_reason=reason, stop_id=np.full(b, -1, np.int32))

  def extend(self, state, rows, token_lists):
    self.calls["extend"] += 1
    for r, ids in zip(rows, token_lists):
      if not ids:
        raise ValueError(f"extend: token list for row {r} is empty")
      if len(ids) > self.max_extend:
        raise ValueError(f"extend: {len(ids)} tokens exceed the largest bucket")
      if len(state.histories[r]) + len(ids) > state.cache_length:
        raise ValueError(f"extend: row {r} would exceed the cache")
      state.histories[r].extend(int(i) for i in ids)
      state.finished[r] = False
    return state

  def set_done(self, state, rows):
    self.calls["set_done"] += 1
    for r in rows:
      state.finished[r] = True
    return state

  def clone_rows(self, state, src, dst):
    self.calls["clone_rows"] += 1
    for s, d in zip(src, dst):
      state.histories[d] = list(state.histories[s])
      state.finished[d] = state.finished[s]
      state.cursor[d] = 0
    return state

  def truncate(self, state, rows, new_lengths):
    self.calls["truncate"] += 1
    for r, n in zip(rows, new_lengths):
      if not 1 <= n <= len(state.histories[r]):
        raise ValueError(f"truncate: bad length {n} for row {r}")
      del state.histories[r][n:]
      state.finished[r] = False
    return state



def check_alignment(batch, policy_state=None):
  """Invariants every rollout must satisfy; returns nothing, raises AssertionError."""
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.labels import Source
  t = batch.traj
  n, width = np.asarray(t.tokens).shape
  assert np.asarray(t.labels).shape == (n, width)
  assert np.asarray(t.sampler_logprobs).shape == (n, width)
  assert np.asarray(t.turn).shape == (n, width)
  labels, mask = np.asarray(t.labels), loss_mask(t.labels, ("policy", "injected"))
  for src in (Source.RETRIEVED, Source.ENV, Source.PROMPT, Source.PAD):
    assert not mask[labels == src].any(), src.name
  assert (mask[:, 1:][labels[:, 1:] == Source.POLICY] == 1).all()
  for i in range(n):
    k = int(t.lengths[i])
    assert (labels[i, k:] == Source.PAD).all()
    assert (labels[i, :k] != Source.PAD).all()
    p = int(t.prompt_lengths[i])
    assert (labels[i, :p] == Source.PROMPT).all()
    assert not (labels[i, p:k] == Source.PROMPT).any()
    assert (np.asarray(t.turn)[i, :p] == -1).all()
    assert (np.asarray(t.turn)[i, p:k] >= 0).all()
    off_policy = labels[i] != Source.POLICY
    assert (np.asarray(t.sampler_logprobs)[i][off_policy] == 0).all()


def search_r1_teacher_engine(top_k: int = 1, max_turns: int = 2):
  """A Search-R1 engine over the real BM25 index of PASSAGES, with a scripted policy that a
  teacher-forced run replaces (cold-start traces, the RL question pool)."""
  from ragjax.rollout.engine import RolloutEngine
  from ragjax.rollout.protocols import get_protocol
  tok = tokenizer()
  proto = get_protocol("search_r1", top_k=top_k, max_turns=max_turns)
  return RolloutEngine(proto, ScriptedPolicy(tok, {}, stop_strings=proto.stop_sequences),
                       bm25_retriever(), tok)
